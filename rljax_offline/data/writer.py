"""Writing episodes to Parquet, streamed row group by row group, each file atomic.

Episode rows (`output_write_episodes=True`): one binary column `item`, one episode a row, the
value `msgpack` of `Episode.get_state()` (RLlib's format). `rllib_layout=True` writes RLlib's
recorder bytes exactly (per-step lists); the default stores one array per buffer, which decodes
many times faster and which RLlib's `SingleAgentEpisode.from_state` reads as well.

Tabular rows (`output_write_episodes=False`): one timestep a row, RLlib's default schema
(see `rljax_offline.data.tabular`).

Each file's key-value metadata holds our format version, the layout and the spaces. Every
data page carries a CRC32 page checksum, which our reader verifies, so a flipped bit in a file
we wrote is an `IntegrityError`, not silently different numbers.

Nothing is overwritten or lost: file names carry the writer's run id (a UTC timestamp and a
random suffix, as RLlib puts a run id in its names), so a second run or a concurrent writer into
the same folder adds files beside the earlier ones; a file is published only when complete (see
`rljax_offline.data.files`), and temp files of killed writers are removed by the next writer.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rljax_offline import spaces as sp
from rljax_offline.data.codec import encode_episode
from rljax_offline.data.files import (
    META_PREFIX,
    _filesystem,
    atomic_output,
    clean_stale_temps,
)
from rljax_offline.data.tabular import episodes_to_table
from rljax_offline.episode.episode import Episode

FORMAT_VERSION = "1"
EPISODE_SCHEMA = pa.schema([pa.field("item", pa.binary())])


def new_run_id() -> str:
    """A run id that sorts by start time: `20261123T105732Z-3fa9c2d1`."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


def file_metadata(layout: str, episode: Episode | None) -> dict[bytes, bytes]:
    """The Parquet key-value metadata of a file we write: format version, layout and the
    spaces of `episode` where it carries them.

    Args:
      layout: the file's layout name.
      episode: an episode whose spaces are recorded (None: none).
    """
    meta = {"format_version": FORMAT_VERSION, "layout": layout}
    if episode is not None:
        for name, spec in (("observation_space", episode.observation_space_spec),
                           ("action_space", episode.action_space_spec)):
            if spec is not None:
                meta[name] = json.dumps(sp.space_to_dict(spec))
    return {(META_PREFIX + k).encode(): v.encode() for k, v in meta.items()}


def with_rllib_action_dtype(episode: Episode) -> Episode:
    """Discrete actions as int32, the dtype RLlib records them with (numpy scalars or arrays
    in episode rows, an int32 column in tabular rows); other actions unchanged.

    Args:
      episode: the episode.
    """
    actions, spec = episode.actions, episode.action_space_spec
    discrete = isinstance(spec, sp.DiscreteSpec) or (
        spec is None and isinstance(actions, np.ndarray) and actions.ndim == 1)
    if discrete and isinstance(actions, np.ndarray) and actions.dtype == np.int64:
        return episode.replace(actions=actions.astype(np.int32))
    return episode


class EpisodeWriter:
    """Streams episodes into Parquet files under a folder (or a URI on any pyarrow filesystem).

    Rows are buffered only up to `row_group_size` rows or `row_group_bytes` and written as a
    row group, so recording for hours does not grow memory. A file is finished after
    `output_max_rows_per_file` rows (None: one file; rows are episodes, or timesteps in the
    tabular layout, and a file always ends on a whole episode, as RLlib's recorder writes) and
    only then appears under its final name.

    `rllib_folders="CartPoleEnv"` lays the files out as RLlib does:
    `<path>/cartpoleenv/run-000001-00001/...` (one run folder per written file).

    File names hold `run_id` (default: a new `new_run_id()`), so writers never collide.

    Args:
      path: the output folder (local path or URI).
      output_write_episodes: episode rows (True) or tabular rows (False).
      output_max_rows_per_file: rows per file (None: one file).
      output_compress_columns: tabular columns stored as RLlib's compressed strings.
      compression: the Parquet codec.
      rllib_layout: write RLlib recorder's per-step lists exactly (slower to read).
      row_group_size: rows buffered per row group.
      row_group_bytes: bytes buffered at most before a row group is written.
      filesystem: a `pyarrow.fs.FileSystem` or a name (`"s3"`, `"gcs"`); default: from `path`.
      filesystem_kwargs: keyword arguments that build `filesystem` from its name.
      file_prefix: the file names' prefix.
      rllib_folders: an env name: lay files out in RLlib's `<env>/run-.../` folders.
      env_runner_index: the runner index in RLlib's run-folder names.
      run_id: the id in the file names (default: `new_run_id()`).

    Raises:
      ValueError: `output_max_rows_per_file` that is not a positive int.

    Example:
        >>> with EpisodeWriter("/tmp/cartpole", output_max_rows_per_file=100) as w:
        ...     for ep in episodes:
        ...         w.write(ep)
    """

    def __init__(self, path: str, *, output_write_episodes: bool = True,
                 output_max_rows_per_file: int | None = None,
                 output_compress_columns: list[str] | None = None, compression: str = "zstd",
                 rllib_layout: bool = False, row_group_size: int = 64,
                 row_group_bytes: int = 64 << 20,
                 filesystem: Any = None, filesystem_kwargs: dict | None = None,
                 file_prefix: str = "episodes", rllib_folders: str | None = None,
                 env_runner_index: int = 1, run_id: str | None = None):
        if output_max_rows_per_file is not None and output_max_rows_per_file <= 0:
            raise ValueError("output_max_rows_per_file must be a positive int or None")
        self._fs, self._root = _filesystem(os.fspath(path), filesystem, filesystem_kwargs)
        self._episodes = output_write_episodes
        self._max_rows = output_max_rows_per_file
        self._compress = output_compress_columns
        self._compression = compression
        self._rllib_layout = rllib_layout
        self._row_group_size = row_group_size
        self._row_group_bytes = row_group_bytes
        self._buffered_bytes = 0
        self._prefix = file_prefix
        self._rllib_env = rllib_folders.lower() if rllib_folders else None
        self._runner = env_runner_index
        self._buffer: list = []
        self._rows_in_file = 0
        self._file_index = 0
        self._ctx = None
        self._pq_writer = None
        self._files: list[str] = []
        self._closed = False
        self.run_id = run_id or new_run_id()
        clean_stale_temps(self._fs, self._root)

    # ------------------------------------------------------------------ rows

    def _rows_of(self, episode: Episode) -> pa.Table:
        episode = with_rllib_action_dtype(episode)
        if self._episodes:
            blob = encode_episode(episode, finalized=not self._rllib_layout)
            return pa.table({"item": pa.array([blob], pa.binary())})
        return episodes_to_table([episode], compress_columns=self._compress)

    def write(self, episode: Episode) -> None:
        """Adds one episode (one row, or one row per timestep in the tabular layout)."""
        if self._closed:
            raise ValueError("this EpisodeWriter is closed")
        if not isinstance(episode, Episode):
            raise TypeError(f"EpisodeWriter.write takes an Episode, got {type(episode).__name__}")
        table = self._rows_of(episode)
        if self._pq_writer is None:
            self._open(table.schema, episode)
        self._buffer.append(table)
        self._buffered_bytes += table.nbytes
        self._rows_in_file += table.num_rows  # tabular: timesteps, as RLlib counts rows
        if (len(self._buffer) >= self._row_group_size
                or self._buffered_bytes >= self._row_group_bytes):
            self._flush()
        if self._max_rows is not None and self._rows_in_file >= self._max_rows:
            self._finish_file()

    def write_many(self, episodes: Iterable[Episode]) -> None:
        for ep in episodes:
            self.write(ep)

    # ------------------------------------------------------------------ files

    def _open(self, schema: pa.Schema, episode: Episode) -> None:
        layout = "episodes" if self._episodes else "tabular"
        schema = schema.with_metadata({**(schema.metadata or {}),
                                       **file_metadata(layout, episode)})
        name = self._file_name()
        self._ctx = atomic_output(self._fs, name)
        stream = self._ctx.__enter__()
        # Statistics of the episode column would copy whole episodes into page headers and
        # the footer (min/max of the blobs): off for episode rows, kept for tabular columns.
        self._pq_writer = pq.ParquetWriter(stream, schema, compression=self._compression,
                                           write_page_checksum=True,
                                           write_statistics=not self._episodes)
        self._current = name

    def _file_name(self) -> str:
        if self._rllib_env is None:
            return f"{self._root}/{self._prefix}_{self.run_id}_{self._file_index:06d}.parquet"
        # RLlib's layout: <output>/<env name>/run-<runner, 6 digits><-write count, zfill 6>/
        run = f"run-{self._runner:06d}" + f"-{self._file_index + 1}".zfill(6)
        return (f"{self._root}/{self._rllib_env}/{run}/"
                f"{self._prefix}_{self.run_id}_000000-0.parquet")

    def _flush(self) -> None:
        if self._buffer:
            table = pa.concat_tables(self._buffer).cast(self._pq_writer.schema)
            self._pq_writer.write_table(table)
            self._buffer = []
            self._buffered_bytes = 0

    def _finish_file(self) -> None:
        if self._pq_writer is None:
            return
        self._flush()
        self._pq_writer.close()
        self._ctx.__exit__(None, None, None)
        self._files.append(self._current)
        self._pq_writer = self._ctx = None
        self._rows_in_file = 0
        self._file_index += 1

    def close(self) -> list[str]:
        """Finishes the open file; returns every file written."""
        if not self._closed:
            self._finish_file()
            self._closed = True
        return list(self._files)

    def abort(self, exc: BaseException | None = None) -> list[str]:
        """Drops the unfinished file (its temp file is removed); finished files stay and are
        returned."""
        if self._ctx is not None:
            try:
                self._pq_writer.close()
            finally:
                err = exc or RuntimeError("aborted")
                self._ctx.__exit__(type(err), err, None)
        self._pq_writer = self._ctx = None
        self._closed = True
        return list(self._files)

    def __enter__(self) -> EpisodeWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is None:
            self.close()
        else:
            self.abort(exc)


def write_episodes(episodes: Iterable[Episode], path: str, **options) -> list[str]:
    """Writes episodes under `path` (see `EpisodeWriter` for the options); returns the files.

    Args:
      episodes: the episodes to write.
      path: the output folder.
      **options: `EpisodeWriter`'s options.

    Returns:
      The files written.
    """
    with EpisodeWriter(path, **options) as writer:
        writer.write_many(episodes)
    return writer.close()
