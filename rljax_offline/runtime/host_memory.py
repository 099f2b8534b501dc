"""Keeping a streaming process's resident memory flat.

Streaming data allocates and frees a few large host buffers per batch (decoded frames, the
learner columns, XLA's CPU buffers), from two threads. glibc's malloc raises its mmap threshold
after each large free, so later buffers of that size come from the heap arenas, where freed
blocks are kept and fragment: the resident set then creeps up batch after batch. A fixed
threshold serves every large buffer with its own mapping, returned to the OS when freed, so the
resident set stays flat (the figures of an Atari stream with and without it are on the
benchmarks page, "Figures behind design choices").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

#: glibc's `mallopt` parameter for the mmap threshold (malloc.h).
_M_MMAP_THRESHOLD = -3
DEFAULT_THRESHOLD = 1 << 20


@functools.cache
def _glibc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 - raises AttributeError off glibc
        return libc
    except (OSError, AttributeError):
        return None


def fixed_mmap_threshold(threshold: int = DEFAULT_THRESHOLD) -> bool:
    """Makes glibc serve every allocation of `threshold` bytes or more with its own mapping,
    freed straight back to the OS, and stop moving the threshold (`mallopt(M_MMAP_THRESHOLD)`,
    as the `MALLOC_MMAP_THRESHOLD_` environment variable would at start). Returns False where
    it does not apply (not glibc); the process's own setting through that variable wins.

    Args:
      threshold: the allocation size in bytes from which glibc maps memory of its own
        (`DEFAULT_THRESHOLD`, 1 MB).
    """
    if os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        return False
    libc = _glibc()
    if libc is None:
        return False
    if threshold < 0:
        raise ValueError(f"threshold must be >= 0 bytes, got {threshold}")
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)))
