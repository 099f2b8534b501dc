"""One background prefetch thread, for every stream that is read ahead: episodes decoded
ahead by the reader (`data.iter_episodes(prefetch=...)`) and batches placed on the devices
ahead of the updates (`learning.data_parallel.prefetch_to_device`).

`Prefetcher(items, transform, size)` runs `transform` (e.g. a host-to-device copy) on each item
in a thread and keeps `size` results waiting. The thread never outlives its consumer: it ends
on exhaustion, on an error (raised by `next()`), on `close()`, on `with` exit, and when the
`Prefetcher` is collected (the thread holds no reference to it); a producer blocked on a full
queue gives up once the consumer has stopped.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterable
from typing import NamedTuple


def _identity(item):
    return item


class _End(NamedTuple):
    error: BaseException | None = None


def _produce(items: Iterable, transform: Callable, out: queue.Queue, stop: threading.Event):
    """The prefetch thread: items -> `transform` -> `out`, until the source ends, fails or
    `stop` is set. Holds no reference to its `Prefetcher`, so an abandoned one is collected
    (and its thread stopped) like any object."""

    def offer(item) -> bool:
        while not stop.is_set():
            try:
                out.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    it = iter(items)
    try:
        for item in it:
            if stop.is_set() or not offer(transform(item)):
                return
        offer(_End())
    except BaseException as e:  # handed to the consumer, raised there
        offer(_End(e))
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


class Prefetcher:
    """An iterator of `transform(item)` for the items of `items`, computed by a background
    thread that keeps `size` of them waiting (2: double-buffered), so producing, the
    transform and the consumer's work overlap.

    `close()` (also on exhaustion, on an error, on `with` exit and when the object is
    collected) stops the thread and closes the source; errors in the source are raised by
    `next()`.

    Args:
      items: the source iterable (closed by `close()` when it has a `close`).
      transform: applied to each item on the thread (None: the items as they are).
      size: how many transformed items wait at most (2: double-buffered).
      name: the thread's name (one name a kind of stream, for thread dumps).

    Raises:
      ValueError: `size` below 1.
    """

    def __init__(self, items: Iterable, transform: Callable | None = None, size: int = 2,
                 name: str = "rljax-offline-prefetch"):
        if size < 1:
            raise ValueError(f"prefetch size must be >= 1, got {size}")
        self._queue: queue.Queue = queue.Queue(maxsize=size)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=_produce, name=name,
                                        args=(items, transform or _identity, self._queue,
                                              self._stop),
                                        daemon=True)
        self._done = False
        self._thread.start()

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        item = self._queue.get()
        if isinstance(item, _End):
            self.close()
            if item.error is not None:
                raise item.error
            raise StopIteration
        return item

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def close(self, timeout: float = 10.0) -> None:
        """Stops the thread (waiting up to `timeout` s for a read in progress)."""
        self._done = True
        self._stop.set()
        while True:  # unblock a producer waiting on a full queue
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        with contextlib.suppress(Exception):
            self._stop.set()
