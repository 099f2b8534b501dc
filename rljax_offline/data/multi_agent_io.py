"""Writing and reading multi-agent episodes as Parquet (layout: `data.multi_agent_format`).

`MultiAgentEpisodeWriter` streams row groups into a pair of files (`agents/` and `env/`, same
name), each published atomically (the env file first, so a reader that sees an agents file
finds its env records); `max_episodes_per_file` starts a new pair. `iter_multi_agent_episodes`
streams the agents files row group by row group and holds one multi-agent episode at a time
(plus the small env file of the current pair).

Example:
    >>> import tempfile
    >>> from rljax_offline.episode.multi_agent_builder import MultiAgentEpisodeBuilder
    >>> b = MultiAgentEpisodeBuilder("ep0")
    >>> b.add_env_reset(observations={"a": 0.0, "b": 1.0})
    >>> b.add_env_step({"a": 1.0, "b": 2.0}, {"a": 0, "b": 1}, {"a": 1.0, "b": 0.0})
    >>> folder = tempfile.mkdtemp()
    >>> _ = write_multi_agent_episodes([b.finalize()], folder)
    >>> [(ep.id_, sorted(ep.agent_ids)) for ep in iter_multi_agent_episodes(folder)]
    [('ep0', ['a', 'b'])]
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from rljax_offline.data.files import (
    _filesystem,
    as_data_error,
    atomic_output,
    clean_stale_temps,
    display_name,
    open_parquet,
)
from rljax_offline.data.multi_agent_format import (
    AGENT_SCHEMA,
    ENV_SCHEMA,
    agent_rows,
    env_record,
    episode_from_rows,
    schema_metadata,
)
from rljax_offline.data.writer import new_run_id
from rljax_offline.episode.multi_agent import MultiAgentEpisode
from rljax_offline.errors import OfflineDataError


class MultiAgentEpisodeWriter:
    """Writes `MultiAgentEpisode`s under `path` (see the module docstring).

    Args:
      path: the output folder (local path or any pyarrow filesystem URI).
      max_episodes_per_file: start a new file pair after this many multi-agent episodes.
      row_group_size: multi-agent episodes per row group.
      compression: Parquet compression codec.
      filesystem: a `pyarrow.fs.FileSystem` (default: inferred from `path`).
    """

    def __init__(self, path: str, *, max_episodes_per_file: int | None = None,
                 row_group_size: int = 64, compression: str = "zstd",
                 filesystem: Any = None):
        self._fs, self._root = _filesystem(path, filesystem, None)
        self._max = max_episodes_per_file
        self._rg = int(row_group_size)
        self._compression = compression
        self.run_id = new_run_id()
        self._index = 0
        self._agents: list[pa.Table] = []
        self._env: list[pa.Table] = []
        self._in_file = 0
        self._files: list[str] = []
        self._open_pair: tuple | None = None
        self._closed = False
        for sub in ("agents", "env"):
            folder = f"{self._root}/{sub}"
            self._fs.create_dir(folder, recursive=True)
            clean_stale_temps(self._fs, folder)

    def write(self, episode: MultiAgentEpisode, *, global_state: Any = None) -> None:
        """Adds one multi-agent episode (chunk); `global_state` (or the episode's
        `custom_data["global_state"]`) is the env's state per env step, stored in the env
        record."""
        if self._closed:
            raise ValueError("this MultiAgentEpisodeWriter is closed")
        if not isinstance(episode, MultiAgentEpisode):
            raise TypeError(f"write takes a MultiAgentEpisode, got {type(episode).__name__}")
        if global_state is None:
            global_state = episode.custom_data.get("global_state")
        if self._open_pair is None:
            self._open(episode)
        self._agents.append(agent_rows(episode))
        self._env.append(env_record(episode, global_state))
        self._in_file += 1
        if len(self._env) >= self._rg:
            self._flush()
        if self._max is not None and self._in_file >= self._max:
            self._finish()

    def _open(self, episode: MultiAgentEpisode) -> None:
        name = f"ma_{self.run_id}_{self._index:06d}.parquet"
        pair = []
        for sub, schema in (("env", ENV_SCHEMA), ("agents", AGENT_SCHEMA)):
            path = f"{self._root}/{sub}/{name}"
            ctx = atomic_output(self._fs, path)
            stream = ctx.__enter__()
            writer = pq.ParquetWriter(
                stream, schema.with_metadata(schema_metadata(sub, episode)),
                compression=self._compression, write_page_checksum=True,
                write_statistics=False)
            pair.append((path, ctx, writer))
        self._open_pair = tuple(pair)

    def _flush(self) -> None:
        if self._open_pair is None or not self._env:
            return
        (_, _, env_w), (_, _, agent_w) = self._open_pair
        env_w.write_table(pa.concat_tables(self._env).cast(env_w.schema))
        agent_w.write_table(pa.concat_tables(self._agents).cast(agent_w.schema))
        self._env, self._agents = [], []

    def _finish(self) -> None:
        if self._open_pair is None:
            return
        self._flush()
        for path, ctx, writer in self._open_pair:  # env first: agents never lack records
            writer.close()
            ctx.__exit__(None, None, None)
            self._files.append(path)
        self._open_pair = None
        self._in_file = 0
        self._index += 1

    @property
    def files(self) -> list[str]:
        """The files finished so far (env, agents, ...)."""
        return list(self._files)

    def flush(self) -> None:
        """Finishes the open pair now (every episode written so far is on disk, readable);
        the next episode starts a new pair."""
        self._finish()

    def close(self) -> list[str]:
        """Finishes the open pair; returns every file written (env, agents, ...)."""
        if not self._closed:
            self._finish()
            self._closed = True
        return list(self._files)

    def abort(self, exc: BaseException | None = None) -> None:
        """Drops the unfinished pair (temp files removed); finished pairs stay."""
        if self._open_pair is not None:
            err = exc or RuntimeError("aborted")
            for _, ctx, writer in self._open_pair:
                try:
                    writer.close()
                finally:
                    ctx.__exit__(type(err), err, None)
        self._open_pair = None
        self._closed = True

    def __enter__(self) -> MultiAgentEpisodeWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is None:
            self.close()
        else:
            self.abort(exc)


def write_multi_agent_episodes(episodes: Iterable[MultiAgentEpisode], path: str,
                               **options) -> list[str]:
    """Writes multi-agent episodes under `path`; returns the files.

    Args:
      episodes: the multi-agent episodes.
      path: the output folder.
      **options: `MultiAgentEpisodeWriter`'s options.

    Returns:
      The files written.
    """
    with MultiAgentEpisodeWriter(path, **options) as writer:
        for ep in episodes:
            writer.write(ep)
    return writer.close()


def _env_records(fs: Any, path: str) -> list[dict]:
    name = display_name(fs, path)
    try:
        table = open_parquet(fs, path).read()
    except OfflineDataError:
        raise
    except Exception as e:  # noqa: BLE001 (pyarrow raises many types for a damaged file)
        raise as_data_error(e, name) from None
    missing = [f.name for f in ENV_SCHEMA if f.name not in table.column_names]
    if missing:
        raise OfflineDataError(f"not a multi-agent env file: columns {missing} are missing",
                               file=name)
    return table.to_pylist()


def iter_multi_agent_episodes(path: str, *, filesystem: Any = None,
                              batch_rows: int = 256) -> Iterator[MultiAgentEpisode]:
    """Streams the multi-agent episodes under `path` (file pairs in name order).

    Args:
      path: the folder `MultiAgentEpisodeWriter` wrote (local path or URI).
      filesystem: a `pyarrow.fs.FileSystem` (default: inferred from `path`).
      batch_rows: agent rows read at a time (bounds memory).

    Yields:
      `MultiAgentEpisode`s, in file order.
    """
    fs, root = _filesystem(path, filesystem, None)
    selector = __import__("pyarrow.fs", fromlist=["FileSelector"]).FileSelector(
        f"{root}/agents", allow_not_found=True)
    files = sorted(i.path for i in fs.get_file_info(selector)
                   if i.path.endswith(".parquet") and not os.path.basename(i.path)
                   .startswith("."))
    if not files:
        raise OfflineDataError("no multi-agent data: the folder has no agents/*.parquet",
                               file=path)
    for agents_path in files:
        env_path = f"{root}/env/{os.path.basename(agents_path)}"
        name = display_name(fs, agents_path)
        if fs.get_file_info(env_path).type.name == "NotFound":
            raise OfflineDataError("agents file has no paired env/ file "
                                   f"({display_name(fs, env_path)})", file=name)
        records = _env_records(fs, env_path)
        yield from _episodes_of_agents_file(fs, agents_path, name, records, batch_rows)


def _episodes_of_agents_file(fs, path, name, records, batch_rows):
    """The writer puts the k-th episode's agent rows and its env record k-th in the paired
    files: groups of consecutive rows with one (id, env_t_started) pair with records."""
    pf = open_parquet(fs, path)
    missing = [f.name for f in AGENT_SCHEMA if f.name not in pf.schema_arrow.names]
    if missing:
        raise OfflineDataError(f"not a multi-agent agents file: columns {missing} are missing",
                               file=name)
    group: list[dict] = []
    key, first_row, row, k = None, 0, 0, 0

    def finish():
        rec = records[k] if k < len(records) else None
        if rec is not None and (rec["multi_agent_episode_id"], rec["env_t_started"]) != key:
            raise OfflineDataError(
                f"agent {group[0]['agent_id']!r}: the rows of multi-agent episode {key[0]!r} "
                f"(env_t_started {key[1]}) meet env record {k} of episode "
                f"{rec['multi_agent_episode_id']!r}: the paired files do not match",
                file=name, row=first_row)
        return episode_from_rows(group, rec, file=name, first_row=first_row)

    try:
        for batch in pf.iter_batches(batch_size=batch_rows):
            for rec in batch.to_pylist():
                new_key = (rec["multi_agent_episode_id"], rec["env_t_started"])
                if new_key != key or rec["agent_id"] in {r["agent_id"] for r in group}:
                    if group:
                        yield finish()
                        k += 1
                    group, key, first_row = [], new_key, row
                group.append(rec)
                row += 1
    except OfflineDataError:
        raise
    except Exception as e:  # noqa: BLE001 (pyarrow raises many types for a damaged file)
        raise as_data_error(e, name) from None
    if group:
        yield finish()
        k += 1
    if k != len(records):
        raise OfflineDataError(f"the paired env/ file has {len(records)} records for {k} "
                               "multi-agent episodes", file=name)


def read_multi_agent_episodes(path: str, **options) -> list[MultiAgentEpisode]:
    """Every multi-agent episode under `path`.

    Args:
      path: the folder `MultiAgentEpisodeWriter` wrote.
      **options: `iter_multi_agent_episodes`' options.

    Returns:
      The episodes as a list.
    """
    return list(iter_multi_agent_episodes(path, **options))
