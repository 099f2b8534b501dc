"""Reading episodes from Parquet: episode rows or tabular rows, from files, folders, globs or
URIs on any pyarrow filesystem; materialized or streamed with a shuffle buffer and prefetch.

Failures are contained per file: anything that goes wrong while reading a file (pyarrow,
msgpack, lz4, numpy, out of memory, nesting too deep) becomes an `OfflineDataError` naming the
file (and row and column where known), so `on_bad_file="skip"` can skip it and "raise" never
lets a raw library exception through. Page checksums are verified where a file has them.

Many small files on remote storage (RLlib's recorder writes one episode per file) are read by
a thread pool that overlaps the waiting; local files are read in order, since decoding holds
the GIL and threads only add contention there.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import itertools
import logging
import os
from collections.abc import Container, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from rljax_offline.data.codec import decode_episode
from rljax_offline.data.files import as_data_error, display_name, open_parquet, resolve_files
from rljax_offline.data.minari import iter_minari_episodes
from rljax_offline.data.tabular import iter_tabular_episodes
from rljax_offline.data.validate import check_episode
from rljax_offline.episode.episode import Episode
from rljax_offline.errors import OfflineDataError
from rljax_offline.runtime import gc_pause
from rljax_offline.runtime.prefetch import Prefetcher

READ_AHEAD_THREAD = "rljax-offline-read-ahead"  # the thread that decodes episodes ahead

_READ_ERRORS = (pa.ArrowInvalid, pa.ArrowIOError, OSError, EOFError)
_log = logging.getLogger("rljax_offline.data")


def _episodes_of_file(fs: Any, path: str, *, input_read_schema: dict | None = None,
                      observation_space: Any = None, action_space: Any = None,
                      rows: Container[int] | None = None) -> list[Episode]:
    """Every episode of one episode-rows file (or those at `rows`, reading only the row
    groups that hold them), decoded safely, in row order."""
    name = display_name(fs, path)
    pf = open_parquet(fs, path)
    column = (input_read_schema or {}).get("item", "item")
    if column not in pf.schema_arrow.names:
        raise OfflineDataError(
            f"no episode column {column!r}; the file has columns {pf.schema_arrow.names}. "
            "Tabular files (one timestep a row) need input_read_episodes=False",
            file=name, column=column)
    ftype = pf.schema_arrow.field(column).type
    if not (pa.types.is_binary(ftype) or pa.types.is_large_binary(ftype)):
        raise OfflineDataError(f"episode column must be binary (msgpack bytes), got {ftype}",
                               file=name, column=column)
    out, row = [], 0
    try:
        for group in range(pf.num_row_groups):  # one row group in memory at a time
            size = pf.metadata.row_group(group).num_rows
            if rows is not None and not any(r in rows for r in range(row, row + size)):
                row += size
                continue
            for blob in pf.read_row_group(group, columns=[column]).column(0).to_pylist():
                if rows is not None and row not in rows:
                    row += 1
                    continue
                if blob is None:
                    raise OfflineDataError("episode row is null", file=name, row=row,
                                           column=column)
                if not isinstance(blob, bytes):
                    raise OfflineDataError(f"episode row must be bytes, got "
                                           f"{type(blob).__name__}", file=name, row=row,
                                           column=column)
                ep = decode_episode(blob, file=name, row=row)
                check_episode(ep, observation_space=observation_space,
                              action_space=action_space, file=name, row=row)
                out.append(ep)
                row += 1
    except OfflineDataError:
        raise
    except Exception as e:  # noqa: BLE001 - see the module docstring
        raise as_data_error(e, name, f"cannot read row group at row {row}") from None
    return out


class SkipReport(list):
    """Files skipped with `on_bad_file="skip"`: a list of `(file, reason)`, and in
    `dropped_episodes` the `(eps_id, file)` of tabular episodes dropped whole because some of
    their rows were in a skipped file."""

    def __init__(self, *args):
        super().__init__(*args)
        self.dropped_episodes: list[tuple[str, str]] = []

    def __str__(self) -> str:
        text = f"{len(self)} file(s) skipped: " + "; ".join(f"{f}: {r}" for f, r in self)
        if self.dropped_episodes:
            text += (f"; {len(self.dropped_episodes)} episode(s) with rows in a skipped file "
                     "dropped whole")
        return text


def _read_files(files, reader, on_bad_file: str, skipped: SkipReport | None,
                max_workers: int | None):
    """Applies `reader` to every file (threads for many files), in file order."""
    if on_bad_file not in ("raise", "skip"):
        raise ValueError(f"on_bad_file must be 'raise' or 'skip', got {on_bad_file!r}")

    def guarded(item):
        fs, path = item
        try:
            try:
                return reader(fs, path)
            except Exception as e:  # noqa: BLE001 - every failure becomes a named error
                raise as_data_error(e, display_name(fs, path)) from None
        except OfflineDataError as e:
            if on_bad_file == "raise":
                raise
            if skipped is not None:
                skipped.append((display_name(fs, path), getattr(e, "reason", str(e))))
            _log.warning("skipped %s", e)
            return []

    # Decoding holds the GIL: threads pay off only while waiting on remote storage.
    remote = bool(files) and not isinstance(files[0][0], pafs.LocalFileSystem)
    workers = max_workers or (min(16, (os.cpu_count() or 2) * 4) if remote else 1)
    if len(files) == 1 or workers == 1:
        yield from map(guarded, files)
        return
    with cf.ThreadPoolExecutor(workers) as pool:
        window = collections.deque()
        for item in files:
            window.append(pool.submit(guarded, item))
            if len(window) >= workers * 2:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()


def iter_episodes(input_: Any, *, input_read_episodes: bool = True,
                  input_read_schema: dict | None = None, input_filesystem: Any = None,
                  input_filesystem_kwargs: dict | None = None, on_bad_file: str = "raise",
                  shuffle_buffer_size: int = 0, seed: int | None = None, prefetch: int = 0,
                  start: int = 0, process_index: int = 0, process_count: int = 1,
                  observation_space: Any = None, action_space: Any = None,
                  skipped: SkipReport | None = None,
                  max_workers: int | None = None) -> Iterator[Episode]:
    """Streams episodes with bounded memory.

    Args:
      input_: a file, folder (recursive), glob, URI (`s3://...`) or a list of them; or
        `"minari:DATASET_ID"`, a local Minari dataset (`rljax_offline.data.minari`).
      input_read_episodes: True for episode rows, False for tabular rows (one timestep a row,
        grouped into episodes by `eps_id`).
      input_read_schema: maps our column names onto the file's (`{"obs": "o_t", ...}`).
      input_filesystem: a `pyarrow.fs` filesystem (or "s3", "gcs").
      input_filesystem_kwargs: keyword arguments that build `input_filesystem` from its name.
      on_bad_file: "raise" (default) or "skip"; skipped files land in `skipped`.
      shuffle_buffer_size: episodes held in a buffer that yields a random one (0: file order).
      prefetch: episodes decoded ahead on a background thread (0: none).
      start: begin at this episode of the (shuffled) order, as a stream resumed from a
        checkpoint does; the same `seed` gives the same order, so episode `start` on is
        exactly what followed. Episode-rows files (with on_bad_file="raise") skip without
        decoding: the file footers give the row counts, the shuffle buffer is replayed on
        row indices, and only the episodes then held in the buffer are decoded; other
        formats decode the first `start` episodes again and drop them.
      process_index: this process's index: it reads every `process_count`-th file.
      process_count: how many processes share the files.
      observation_space: every episode's observations are checked against it (or, when not
        given, the space stored with the episode): see `data.validate`.
      action_space: the same for the actions.
      skipped: a `SkipReport` that collects what "skip" mode skipped and why.
      seed: the shuffle buffer's seed (the same seed, the same order).
      max_workers: threads that read files at once (default: 1 locally, more for remote
        storage, where reads wait on the network).

    Yields:
      Episodes, in file order or shuffled.

    Raises:
      OfflineDataError: an unreadable file, row or column (with `on_bad_file="raise"`); the
        error names the file (and row and column where known).
      ValueError: `start < 0` or `process_index` outside `[0, process_count)`.
    """
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    if not 0 <= process_index < process_count:
        raise ValueError(f"process_index must be in [0, {process_count}), got {process_index}")
    minari = isinstance(input_, str) and input_.startswith("minari:")
    files = [] if minari else resolve_files(input_, filesystem=input_filesystem,
                                            filesystem_kwargs=input_filesystem_kwargs)
    files = files[process_index::process_count]
    if minari:
        stream = iter_minari_episodes(input_, observation_space=observation_space,
                                      process_index=process_index, process_count=process_count)
    elif input_read_episodes:
        def reader(fs, path, rows=None):
            return _episodes_of_file(fs, path, input_read_schema=input_read_schema,
                                     observation_space=observation_space,
                                     action_space=action_space, rows=rows)
        if start and on_bad_file == "raise":  # a resumed stream: skip without decoding
            stream = _resumed_episode_rows(files, start, shuffle_buffer_size, seed, reader,
                                           skipped, max_workers)
            return _read_ahead(stream, prefetch)
        stream = (ep for eps in _read_files(files, reader, on_bad_file, skipped, max_workers)
                  for ep in eps)
    else:
        stream = iter_tabular_episodes(files, input_read_schema=input_read_schema,
                                       on_bad_file=on_bad_file, skipped=skipped,
                                       observation_space=observation_space,
                                       action_space=action_space)
    if shuffle_buffer_size > 0:
        stream = _shuffled(stream, shuffle_buffer_size, seed)
    if start:
        stream = itertools.islice(stream, start, None)
    return _read_ahead(stream, prefetch)


def _read_ahead(stream: Iterator[Episode], prefetch: int) -> Iterator[Episode]:
    """`stream` decoded `prefetch` episodes ahead on a background thread (0: as it is)."""
    return Prefetcher(stream, size=prefetch, name=READ_AHEAD_THREAD) if prefetch > 0 else stream


def read_episodes(input_: Any, **options) -> list[Episode]:
    """Every episode of `input_` in memory (RLlib's `materialize_data`); see `iter_episodes`.
    The cycle collector waits meanwhile (`gc_pause`: msgpack's garbage has no cycles); a
    stream does not pause it, its reads going on beside the training for hours.

    Args:
      input_: what `iter_episodes` reads.
      **options: `iter_episodes`' options.

    Returns:
      The episodes as a list.
    """
    with gc_pause.paused():
        return list(iter_episodes(input_, **options))


def _shuffled(stream: Iterator, size: int, seed: int | None, buf: list | None = None,
              rng: np.random.Generator | None = None) -> Iterator:
    """A shuffle buffer of `size` items: each arriving item takes the place of a random one,
    which is yielded; the rest, shuffled, at the end. The order depends only on the seed and
    the number of items, never on their values (so `_shuffle_state` can replay it on
    indices). `buf` and `rng` continue a buffer that `_shuffle_state` rebuilt."""
    rng = np.random.default_rng(seed) if rng is None else rng
    buf = [] if buf is None else buf
    for item in stream:
        if len(buf) < size:
            buf.append(item)
            continue
        i = int(rng.integers(len(buf)))
        buf[i], item = item, buf[i]
        yield item
    rng.shuffle(buf)
    yield from buf


def _shuffle_state(total: int, size: int, seed: int | None, start: int):
    """`_shuffled` over `range(total)` stopped before its `start`-th output, without the items:
    `(buffer, rng, next item, None)`, or once the source has ended `(rest, None, total,
    "tail")` with `rest` the outputs from `start` on."""
    rng = np.random.default_rng(seed)
    buf: list[int] = []
    out = 0
    for item in range(total):
        if len(buf) < size:
            buf.append(item)
            continue
        if out == start:
            return buf, rng, item, None
        buf[int(rng.integers(len(buf)))] = item
        out += 1
    rng.shuffle(buf)
    return buf[start - out:], None, total, "tail"


def _resumed_episode_rows(files: list, start: int, shuffle_buffer_size: int,
                          seed: int | None, read_file, skipped, max_workers) -> Iterator[Episode]:
    """Episode-rows files read as `_shuffled` (or file order) would, from the `start`-th
    episode on, decoding only what that order still yields: the row counts come from the
    footers, the shuffle is replayed on row indices, and only the episodes then in the
    buffer and the rows after the last one read are decoded."""
    counts = [open_parquet(fs, path).metadata.num_rows for fs, path in files]
    offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
    total = int(offsets[-1])
    if shuffle_buffer_size > 0:
        held, rng, next_row, tail = _shuffle_state(total, shuffle_buffer_size, seed, start)
    else:
        held, rng, next_row, tail = [], None, min(start, total), None

    def where(index: int) -> tuple[int, int]:
        f = int(np.searchsorted(offsets, index, side="right")) - 1
        return f, index - int(offsets[f])

    by_file: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    for slot, index in enumerate(held):
        f, row = where(index)
        by_file[f].append((row, slot))
    buf: list = [None] * len(held)
    for f, items in by_file.items():
        items.sort()
        fs, path = files[f]
        for (_, slot), ep in zip(items, read_file(fs, path, {row for row, _ in items})):
            buf[slot] = ep
    if tail:
        yield from buf
        return
    if next_row < total:
        f, row = where(next_row)
        fs, path = files[f]
        source = itertools.chain(
            read_file(fs, path, range(row, counts[f])),
            (ep for eps in _read_files(files[f + 1:], read_file, "raise", skipped,
                                       max_workers) for ep in eps))
    else:
        source = iter(())
    yield from (_shuffled(source, shuffle_buffer_size, None, buf, rng)
                if shuffle_buffer_size > 0 else source)


