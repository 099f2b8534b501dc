"""Streaming multi-agent episode rows that can be stopped and resumed exactly: every episode
comes with a `MultiAgentStreamCursor`, the stream's state once that episode is consumed, and
`stream_multi_agent_episodes(path, start=cursor)` yields the very episodes that followed it.

The stream reads epoch after epoch. An epoch's order is a pure function of the seed and the
epoch: with `seed=None` the file pairs in name order and each file's episodes as written;
with a seed the file pairs in a permuted order and each file's episodes permuted within the
file (one file's rows are held, undecoded, while its episodes are handed out). A cursor names
the epoch and how many episodes of its order are consumed; resuming skips the files before
it by their episode counts and, inside a file, goes to the episode's first agent row from the
env records' agent counts (the row groups before it are not read in file order), so skipped
episodes are never decoded. The cursor also holds a fingerprint of the data set (file names
and episode counts): resuming on other data raises `DataChangedError`.

`multi_agent_read_epoch(path, seed)` is the same order as the `read_epoch(epoch, position)`
function `data.stream.stream_batches` takes, whose `StreamCursor` then resumes batches cut
from multi-agent episodes exactly.

Example:
    >>> import tempfile
    >>> from rljax_offline.data.multi_agent_io import write_multi_agent_episodes
    >>> from rljax_offline.episode.multi_agent_builder import MultiAgentEpisodeBuilder
    >>> def episode(i):
    ...     b = MultiAgentEpisodeBuilder(f"ep{i}")
    ...     b.add_env_reset(observations={"a": 0.0, "b": 1.0})
    ...     b.add_env_step({"a": 1.0, "b": 2.0}, {"a": 0, "b": 1}, {"a": 1.0, "b": 0.0})
    ...     return b.finalize()
    >>> folder = tempfile.mkdtemp()
    >>> _ = write_multi_agent_episodes([episode(i) for i in range(5)], folder,
    ...                                max_episodes_per_file=2)
    >>> stream = stream_multi_agent_episodes(folder, seed=0)
    >>> first = [next(stream) for _ in range(3)]
    >>> cursor = first[-1][1]
    >>> rest = [ep.id_ for ep, _ in stream_multi_agent_episodes(folder, seed=0, start=cursor,
    ...                                                          num_epochs=1)]
    >>> sorted([ep.id_ for ep, _ in first] + rest)
    ['ep0', 'ep1', 'ep2', 'ep3', 'ep4']
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow.fs as pafs

from rljax_offline.data.files import _filesystem, as_data_error, display_name, open_parquet
from rljax_offline.data.multi_agent_format import AGENT_SCHEMA, episode_from_rows
from rljax_offline.data.multi_agent_io import _env_records
from rljax_offline.episode.multi_agent import MultiAgentEpisode
from rljax_offline.errors import DataChangedError, OfflineDataError

__all__ = ["MultiAgentStreamCursor", "multi_agent_read_epoch", "stream_multi_agent_episodes"]


@dataclasses.dataclass(frozen=True)
class MultiAgentStreamCursor:
    """The stream's state once some episode is consumed.

    Attributes:
      epoch: the epoch of the next episode.
      position: episodes of that epoch's order already consumed.
      episodes: episodes consumed since the stream began (over restarts too).
      fingerprint: the data set's file names and episode counts, hashed ("" before the
        first episode: any data).
    """

    epoch: int = 0
    position: int = 0
    episodes: int = 0
    fingerprint: str = ""

    def summary(self) -> dict:
        """The cursor as plain JSON values (for a checkpoint's meta.json)."""
        return dataclasses.asdict(self)

    @classmethod
    def restored(cls, summary: dict) -> MultiAgentStreamCursor:
        """The cursor saved as `summary()`.

        Args:
          summary: what `summary()` returned.
        """
        return cls(int(summary["epoch"]), int(summary["position"]), int(summary["episodes"]),
                   str(summary["fingerprint"]))


@dataclasses.dataclass(frozen=True)
class _Pair:
    agents: str
    env: str
    rows: tuple  # agent rows of each episode, from the env records' agent ids


class _Index:
    """The file pairs of a data set and each episode's agent-row count (env files only)."""

    def __init__(self, path: str, filesystem: Any = None):
        self.fs, root = _filesystem(path, filesystem, None)
        root = root.rstrip("/")
        files = sorted(i.path for i in self.fs.get_file_info(
            pafs.FileSelector(f"{root}/agents", allow_not_found=True))
            if i.path.endswith(".parquet") and not os.path.basename(i.path).startswith("."))
        if not files:
            raise OfflineDataError("no multi-agent data: the folder has no agents/*.parquet",
                                   file=path)
        self.pairs = []
        digest = hashlib.sha256()
        for agents in files:
            env = f"{root}/env/{os.path.basename(agents)}"
            if self.fs.get_file_info(env).type == pafs.FileType.NotFound:
                raise OfflineDataError("agents file has no paired env/ file "
                                       f"({display_name(self.fs, env)})",
                                       file=display_name(self.fs, agents))
            rows = self._agent_counts(env)
            self.pairs.append(_Pair(agents, env, rows))
            digest.update(f"{os.path.basename(agents)}:{len(rows)};".encode())
        self.fingerprint = digest.hexdigest()[:16]
        self.total = sum(len(p.rows) for p in self.pairs)

    def _agent_counts(self, env: str) -> tuple:
        name = display_name(self.fs, env)
        try:
            column = open_parquet(self.fs, env).read(columns=["agent_ids"]).column(0)
        except OfflineDataError:
            raise
        except Exception as e:  # noqa: BLE001 (pyarrow raises many types for a damaged file)
            raise as_data_error(e, name) from None
        return tuple(len(ids or []) for ids in column.to_pylist())

    def _records(self, env: str) -> list[dict]:
        return _env_records(self.fs, env)

    def order(self, seed: int | None, epoch: int) -> list[tuple[_Pair, list[int]]]:
        """The epoch's order: `(file pair, its episode numbers in order)` per pair."""
        if seed is None:
            return [(p, list(range(len(p.rows)))) for p in self.pairs]
        rng = np.random.default_rng([int(seed), int(epoch)])
        pairs = [self.pairs[i] for i in rng.permutation(len(self.pairs))]
        return [(p, [int(k) for k in rng.permutation(len(p.rows))]) for p in pairs]

    def episodes(self, pair: _Pair, numbers: list[int]) -> Iterator[MultiAgentEpisode]:
        """The episodes `numbers` of `pair`, in that order (consecutive numbers from the
        start row's row group on; any other order from the file's rows held undecoded)."""
        name = display_name(self.fs, pair.agents)
        records = self._records(pair.env)
        if len(records) != len(pair.rows):
            raise DataChangedError(f"the paired env/ file now has {len(records)} records, "
                                   f"the stream counted {len(pair.rows)}", file=name)
        offsets = np.concatenate([[0], np.cumsum(pair.rows)]).astype(int)
        pf = open_parquet(self.fs, pair.agents)
        missing = [f.name for f in AGENT_SCHEMA if f.name not in pf.schema_arrow.names]
        if missing:
            raise OfflineDataError(f"not a multi-agent agents file: columns {missing} are "
                                   "missing", file=name)
        if pf.metadata.num_rows != offsets[-1]:
            raise OfflineDataError(f"the file has {pf.metadata.num_rows} agent rows, its env "
                                   f"records name {offsets[-1]} agents", file=name)
        try:
            if not numbers or numbers == list(range(numbers[0], numbers[0] + len(numbers))):
                yield from self._in_file_order(pf, name, records, offsets, numbers)
                return
            table = pf.read()
            for k in numbers:
                rows = table.slice(offsets[k], offsets[k + 1] - offsets[k]).to_pylist()
                yield self._episode(rows, records[k], name, int(offsets[k]))
        except OfflineDataError:
            raise
        except Exception as e:  # noqa: BLE001 (pyarrow raises many types for a damaged file)
            raise as_data_error(e, name) from None

    def _in_file_order(self, pf, name, records, offsets, numbers):
        if not numbers:
            return
        first_row = int(offsets[numbers[0]])
        sizes = [pf.metadata.row_group(g).num_rows for g in range(pf.num_row_groups)]
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
        g = int(np.searchsorted(starts, first_row, side="right") - 1)
        row, k, group = int(starts[g]), numbers[0], []
        for batch in pf.iter_batches(row_groups=list(range(g, pf.num_row_groups))):
            for rec in batch.to_pylist():
                if row >= first_row:
                    group.append(rec)
                    if len(group) == offsets[k + 1] - offsets[k]:
                        yield self._episode(group, records[k], name, int(offsets[k]))
                        group, k = [], k + 1
                        if k > numbers[-1]:
                            return
                row += 1

    @staticmethod
    def _episode(rows, record, name, first_row) -> MultiAgentEpisode:
        want = (record["multi_agent_episode_id"], record["env_t_started"])
        got = (rows[0]["multi_agent_episode_id"], rows[0]["env_t_started"])
        if got != want or any((r["multi_agent_episode_id"], r["env_t_started"]) != want
                              for r in rows):
            raise OfflineDataError(
                f"agent {rows[0]['agent_id']!r}: the rows of multi-agent episode {got[0]!r} "
                f"meet the env record of episode {want[0]!r}: the paired files do not match",
                file=name, row=first_row)
        return episode_from_rows(rows, record, file=name, first_row=first_row)


def _from_position(index: _Index, seed, epoch: int, position: int):
    """`(episode, position after it)` of the epoch's order from `position` on."""
    seen = 0
    for pair, numbers in index.order(seed, epoch):
        if seen + len(numbers) <= position:
            seen += len(numbers)
            continue
        skip = max(position - seen, 0)
        for j, ep in enumerate(index.episodes(pair, numbers[skip:])):
            yield ep, seen + skip + j + 1
        seen += len(numbers)


def stream_multi_agent_episodes(path: str, *, start: MultiAgentStreamCursor | None = None,
                                seed: int | None = None, num_epochs: int | None = None,
                                filesystem: Any = None
                                ) -> Iterator[tuple[MultiAgentEpisode, MultiAgentStreamCursor]]:
    """`(episode, cursor)` pairs, the cursor being the state once that episode is consumed.

    Args:
      path: a multi-agent episode-row folder (`agents/` and `env/`).
      start: resume here (a cursor this function yielded, or `restored(summary)`); None
        starts at epoch 0.
      seed: None reads in file order; a seed permutes the files and each file's episodes,
        per epoch.
      num_epochs: stop after this epoch (counted from 0); None streams without end.
      filesystem: a pyarrow filesystem for `path`.
    """
    index = _Index(path, filesystem)
    start = start or MultiAgentStreamCursor()
    if start.fingerprint and start.fingerprint != index.fingerprint:
        raise DataChangedError(f"resuming the stream of {path!r}: the data set is not the one "
                               "the cursor was made on (its files or episode counts changed)")
    if start.position > index.total:
        raise DataChangedError(f"resuming the stream of {path!r}: the cursor is at episode "
                               f"{start.position} of an epoch of {index.total}")
    if index.total == 0:
        raise OfflineDataError("no multi-agent episodes: every env/ file is empty", file=path)
    epoch, position, count = start.epoch, start.position, start.episodes
    while num_epochs is None or epoch < num_epochs:
        for ep, after in _from_position(index, seed, epoch, position):
            count += 1
            yield ep, MultiAgentStreamCursor(epoch, after, count, index.fingerprint)
        epoch, position = epoch + 1, 0


def multi_agent_read_epoch(path: str, seed: int | None = None, filesystem: Any = None
                           ) -> Callable[[int, int], Iterator[MultiAgentEpisode]]:
    """`read_epoch(epoch, position) -> episodes` for `data.stream.stream_batches`: the
    epoch's order of `stream_multi_agent_episodes` from `position` on.

    Args:
      path: a multi-agent episode-row folder.
      seed: as `stream_multi_agent_episodes`.
      filesystem: a pyarrow filesystem for `path`.
    """
    index = _Index(path, filesystem)

    def read_epoch(epoch: int, position: int) -> Iterator[MultiAgentEpisode]:
        return (ep for ep, _ in _from_position(index, seed, epoch, position))

    return read_epoch
