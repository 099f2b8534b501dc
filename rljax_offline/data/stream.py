"""Streamed training batches that can be resumed exactly: every batch carries a `StreamCursor`,
the state of the stream once that batch is consumed, and `stream_batches(start=cursor)` gives
the very batches (bit for bit) that would have followed it.

The stream reads episodes epoch after epoch (each epoch a shuffled order that is a pure
function of the seed and the epoch), in chunks of `chunk_size` episodes; each chunk is fitted
into the connector state (e.g. a mean-std filter) and turned into learner rows, which join a
leftover buffer from which batches of exactly `batch_size` rows are cut. A cursor therefore
names the oldest chunk that still has rows in the buffer (its epoch and position in that
epoch's order), how many of its rows are already in batches, and the connector state before
that chunk was fitted: replaying from there re-reads at most the chunks covering one batch,
refits them the same way and drops the rows already used, so the leftover buffer and the
connector state come back without being saved as data. A consumer that runs behind the
producer (a prefetch queue) keeps the cursor of the last batch it consumed.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

from rljax_offline.episode.episode import Episode
from rljax_offline.errors import DataChangedError


@dataclasses.dataclass(frozen=True)
class StreamCursor:
    """The stream's state once some batch is consumed.

    Attributes:
      epoch: the epoch of the oldest chunk with rows still waiting in the leftover buffer
        (or of the next chunk to read when none waits).
      position: that chunk's first episode in the epoch's shuffled order.
      skip_rows: rows of that chunk (and the ones after it) already in batches.
      replay_state: the connector state before that chunk was fitted.
      connector_state: the connector state after every chunk read for the batches so far
        (what the learner keeps).
      batches: batches consumed since the stream began (over restarts too).
    """

    epoch: int = 0
    position: int = 0
    skip_rows: int = 0
    replay_state: Any = ()
    connector_state: Any = ()
    batches: int = 0

    def summary(self) -> dict:
        """The cursor's plain numbers (saved readable in a checkpoint's meta.json)."""
        return {"epoch": self.epoch, "position": self.position, "skip_rows": self.skip_rows,
                "batches": self.batches}

    def replay_bytes(self) -> bytes:
        """`replay_state` serialized (flax msgpack) for a checkpoint."""
        host = jax.tree_util.tree_map(np.asarray, jax.device_get(self.replay_state))
        return serialization.to_bytes(host)

    @classmethod
    def restored(cls, summary: dict, replay: bytes, target: Any) -> StreamCursor:
        """The cursor saved as `summary()` and `replay_bytes()`, its replay state in the
        structure of `target` (a fresh connector state); `connector_state` is left empty:
        replaying refits it."""
        host = jax.tree_util.tree_map(np.asarray, jax.device_get(target))
        state = serialization.from_bytes(host, replay)
        return cls(epoch=int(summary["epoch"]), position=int(summary["position"]),
                   skip_rows=int(summary["skip_rows"]), replay_state=state,
                   batches=int(summary["batches"]))


def _num_rows(tree: Any) -> int:
    return len(jax.tree_util.tree_leaves(tree)[0])


def _rows(tree: Any, start: int, stop: int | None = None) -> Any:
    return jax.tree_util.tree_map(lambda x: x[start:stop], tree)


def _chunks(stream: Iterator, size: int) -> Iterator[list]:
    chunk = []
    for item in stream:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def stream_batches(read_epoch: Callable[[int, int], Iterator[Episode]],
                   to_rows: Callable[[list[Episode], Any], tuple[dict, Any]],
                   batch_size: int, chunk_size: int, start: StreamCursor,
                   what: str = "the input") -> Iterator[tuple[dict, StreamCursor]]:
    """`(batch, cursor)` pairs without end, resuming at `start`.

    Args:
      read_epoch: `(epoch, position) -> episodes` of that epoch's order from `position` on
        (the same order on every call).
      to_rows: `(chunk, connector_state) -> (rows, connector_state)`: fits the state on the
        chunk and returns its learner rows (a dict pytree, rows on axis 0).
      batch_size: rows of each batch.
      chunk_size: episodes fitted and converted at a time.
      start: where to begin (`StreamCursor(replay_state=fresh_state)` for the beginning).
      what: names the data in errors.
    """
    epoch, position, cstate = start.epoch, start.position, start.replay_state
    drop, consumed, batches = start.skip_rows, start.skip_rows, start.batches
    # (epoch, position, state before, rows) of each chunk with rows in `buf`, oldest first
    pending: collections.deque = collections.deque()
    buf: dict | None = None
    while True:
        for chunk in _chunks(read_epoch(epoch, position), chunk_size):
            before = cstate
            cols, cstate = to_rows(chunk, cstate)
            n = _num_rows(cols)
            pending.append((epoch, position, before, n))
            position += len(chunk)
            if drop:  # rows of a resumed chunk that earlier batches took
                if n <= drop:
                    raise DataChangedError(
                        f"resuming the stream of {what}: epoch {epoch} at episode "
                        f"{position - len(chunk)} gives {n} rows, the checkpoint used {drop} "
                        "of them; the data changed since the checkpoint")
                cols, drop = _rows(cols, drop), 0
            buf = cols if buf is None else jax.tree_util.tree_map(
                lambda a, b: jnp.concatenate([a, b]), buf, cols)
            while _num_rows(buf) >= batch_size:
                batch, buf = _rows(buf, 0, batch_size), _rows(buf, batch_size)
                consumed += batch_size
                batches += 1
                while pending and consumed >= pending[0][3]:
                    consumed -= pending.popleft()[3]
                if pending:
                    a_epoch, a_position, a_state, _ = pending[0]
                else:
                    a_epoch, a_position, a_state = epoch, position, cstate
                yield batch, StreamCursor(a_epoch, a_position, consumed, a_state, cstate,
                                          batches)
        if position == 0:  # a whole epoch without an episode
            raise ValueError(f"no episodes found in {what}")
        epoch, position = epoch + 1, 0


class CursorTracker:
    """Iterates the batches of a `(batch, cursor)` iterator and keeps the cursor of the last
    batch taken (the consumer's position, not the producer's).

    Args:
      source: the `(batch, cursor)` iterator.
      cursor: the cursor before the first batch.
    """

    def __init__(self, source: Iterator[tuple[Any, StreamCursor]], cursor: StreamCursor):
        self.source, self.cursor = source, cursor

    def __iter__(self):
        return self

    def __next__(self):
        batch, self.cursor = next(self.source)
        return batch

    def close(self) -> None:
        close = getattr(self.source, "close", None)
        if close is not None:
            close()


class _OnePass(Exception):
    """`sample_timesteps` reads its episodes once: the stream's second epoch ends it."""


def sample_timesteps(episodes: Iterable[Episode], train_batch_size: int, *,
                     input_read_batch_size: int = 16, len_lookback_buffer: int = 0,
                     drop_last: bool = True) -> Iterator[list[Episode]]:
    """Lists of episode chunks holding exactly `train_batch_size` timesteps (RLlib's
    episode-buffer semantics for offline episode rows), from one pass over `episodes`.

    A host-side view of `stream_batches`, which does the cutting: its rows here are each
    timestep's (episode, t), and each batch of them becomes the chunks it covers. An episode
    that does not fit is cut; its rest opens the next batch as a chunk that keeps up to
    `len_lookback_buffer` steps of lookback (`Episode.slice`), so no timestep is lost or
    repeated.

    Args:
      episodes: a (streamed) iterable of episodes, e.g. `iter_episodes(...)`.
      train_batch_size: timesteps per batch.
      input_read_batch_size: episodes pulled from the stream at a time.
      len_lookback_buffer: lookback the continuation chunks keep (as far as data exists).
      drop_last: drop the final batch when it is short (else yield it short).
    """
    if train_batch_size <= 0 or input_read_batch_size <= 0:
        raise ValueError("train_batch_size and input_read_batch_size must be positive")
    source = iter(episodes)
    first = next(source, None)
    if first is None:
        return
    source = itertools.chain([first], source)
    held: dict[int, tuple[Episode, int]] = {}  # episode number -> (episode, its first row)
    episodes_read = rows_read = 0

    def read_epoch(epoch: int, position: int) -> Iterator[Episode]:
        if epoch:
            raise _OnePass
        return source

    def to_rows(chunk: list[Episode], state: Any) -> tuple[dict, Any]:
        nonlocal episodes_read, rows_read
        number = range(episodes_read, episodes_read + len(chunk))
        for k, ep in zip(number, chunk):
            held[k] = (ep, rows_read)
            rows_read += len(ep)
        episodes_read += len(chunk)
        return {"episode": np.concatenate([np.full(len(ep), k, np.int32)
                                           for k, ep in zip(number, chunk)]),
                "t": np.concatenate([np.arange(len(ep), dtype=np.int32) for ep in chunk])}, state

    def chunk_of(k: int, t0: int, t1: int) -> Episode:
        ep = held[k][0]
        if t0 == 0:
            return ep if t1 == len(ep) else ep.slice(slice(0, t1))
        return ep.slice(slice(t0, t1), len_lookback_buffer=len_lookback_buffer)

    rows_cut = 0
    try:
        for batch, _ in stream_batches(read_epoch, to_rows, train_batch_size,
                                       input_read_batch_size, StreamCursor(), "the episodes"):
            number, t = np.asarray(batch["episode"]), np.asarray(batch["t"])
            cuts = np.flatnonzero(np.diff(number)) + 1
            yield [chunk_of(int(number[a]), int(t[a]), int(t[b - 1]) + 1)
                   for a, b in zip([0, *cuts], [*cuts, len(number)])]
            rows_cut += train_batch_size
            for k in [k for k, (ep, start) in held.items() if start + len(ep) <= rows_cut]:
                del held[k]
    except _OnePass:
        pass
    rest = [chunk_of(k, max(rows_cut - start, 0), len(ep))
            for k, (ep, start) in sorted(held.items()) if max(rows_cut - start, 0) < len(ep)]
    if rest and not drop_last:
        yield rest
