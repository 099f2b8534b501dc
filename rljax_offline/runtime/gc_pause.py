"""Python's cyclic garbage collector paused around bulk decoding.

Decoding an episode row makes thousands of short-lived dicts and lists (msgpack's output)
that die within the row and form no cycles. They still count towards the collector's
thresholds, and every so often a full collection walks every object the process holds, which
after importing jax, flax and optax is a great many, so each full pass costs a noticeable
share of a small read (`benchmarks/bc_cartpole.py` counts them; figures on the benchmarks
page, "Figures behind design choices"). Reference counting frees the decoder's objects as
before; only the cycle search waits until the read is done. Reads that materialize the data
pause it (`read_episodes`, an algorithm's `load_data`); streams do not, their reads going on
beside the training for hours.

`paused()` nests and is shared by threads: the first to enter turns the collector off (if it
was on), the last to leave turns it back on; a collector the user had turned off stays off.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The collector off for the duration of the block (see the module docstring)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
