"""One piece of start-up work on a thread of its own, its result collected later: how a run
overlaps XLA compiles (which release the GIL) with the Python work of reading data and tracing
on the main thread.

`Background(fn, *args)` starts `fn(*args)` at once; `result()` waits for it and returns its
value or raises its exception (each time it is asked, with the worker's traceback). The thread
ends when `fn` returns: there is nothing to close, and `result()` or `wait()` leave no thread
behind. It is not a daemon: an interpreter that exits meanwhile waits for the (short, finite)
work to end rather than tear down under an XLA compile still running in C++.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

THREAD_NAME = "rljax_offline-background"


class Background:
    """`fn(*args)` running on a background thread (see the module docstring).

    Args:
      fn: the function to run; its value or error is handed to the caller by `result()`.
      *args: its positional arguments.
      name: the thread's name (`THREAD_NAME` by default, which tests look for).
    """

    def __init__(self, fn: Callable, *args: Any, name: str = THREAD_NAME):
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn, args), name=name,
                                        daemon=False)
        self._thread.start()

    def _run(self, fn: Callable, args: tuple) -> None:
        try:
            self._value = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the caller by result()
            self._error = e

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self) -> None:
        """Waits for the work to end, whatever its outcome."""
        self._thread.join()

    def result(self) -> Any:
        """The work's value; raises its exception if it failed."""
        self.wait()
        if self._error is not None:
            raise self._error
        return self._value
