"""RLlib's compressed cells: `base64(lz4.frame(pickle(ndarray)))`, RLlib's default for the
`obs` / `new_obs` columns of its tabular data and for its old SampleBatch JSON.

Decoding is safe against crafted files: a restricted unpickler allows only `numpy`'s
`_frombuffer` (the protocol-5 layout RLlib writes, which builds the array from the pickle's
own bytes) and `numpy.dtype`: no other global, so a crafted file cannot run code, and no
`ndarray` reconstruction, so no array is allocated from a size header or comes back with
uninitialised memory. Decompression is bounded (16 MB plus 100x the cell's size), whatever
the frame header claims.
"""

from __future__ import annotations

import base64
import binascii
import io
import pickle

import numpy as np

__all__ = ["pack_compressed", "unpack_compressed"]

_ALLOWED_GLOBALS = {
    ("numpy._core.numeric", "_frombuffer"), ("numpy.core.numeric", "_frombuffer"),
    ("numpy", "dtype"),
}
#: Most bytes one compressed cell may inflate to: a fixed allowance (a large image row) plus
#: 100x its size (the reader's memory aim); a frame claiming more is refused before
#: anything is allocated.
_CELL_BASE_LIMIT = 16 << 20
_CELL_RATIO_LIMIT = 100


class _NumpyOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed (only numpy's "
                                         "array-rebuilding functions are)")
        return super().find_class(module, name)


def unpack_compressed(value: str | bytes) -> np.ndarray:
    """Decodes one RLlib-compressed cell safely; raises `ValueError` on anything else.

    Never unpickles anything but plain numeric arrays, and bounds decompression whatever the
    frame header claims (see the module docstring).

    Args:
      value: a cell RLlib wrote with `pack` (`base64(lz4(pickle(array)))`), as str or bytes.

    Returns:
      The array.

    Raises:
      ValueError: a cell that is not such an array, or that would decompress beyond the bound.
    """
    import lz4.frame

    try:
        packed = base64.b64decode(value, validate=True)
        limit = _CELL_BASE_LIMIT + _CELL_RATIO_LIMIT * len(packed)
        claimed = lz4.frame.get_frame_info(packed).get("content_size") or 0
        if claimed > limit:
            raise ValueError(f"frame claims {claimed} bytes, more than the {limit} allowed "
                             f"for a cell of {len(packed)} bytes")
        decompressor = lz4.frame.LZ4FrameDecompressor()
        raw = decompressor.decompress(packed, max_length=limit)
        if not decompressor.eof:
            raise ValueError("frame is truncated or decompresses to more than "
                             f"{limit} bytes (more than LZ4 can compress)")
    except (binascii.Error, RuntimeError, ValueError, TypeError) as e:
        raise ValueError(f"not base64(lz4) data: {e}") from None
    try:
        arr = _NumpyOnlyUnpickler(io.BytesIO(raw)).load()
    except Exception as e:  # noqa: BLE001 - a corrupt pickle raises anything; none runs code
        raise ValueError(f"refused pickle payload: {type(e).__name__}: {e}") from None
    if not isinstance(arr, (np.ndarray, np.generic)) or np.asarray(arr).dtype.kind in "OV":
        raise ValueError(f"compressed cell holds a {type(arr).__name__}, not a numeric array")
    return np.asarray(arr)


def pack_compressed(arr: np.ndarray) -> str:
    """RLlib's compressed cell for one array (readable by RLlib's `unpack`).

    Args:
      arr: the array of one cell.

    Returns:
      The `base64(lz4(pickle))` string RLlib's `unpack` reads.
    """
    import lz4.frame

    return base64.b64encode(lz4.frame.compress(pickle.dumps(np.asarray(arr), protocol=5))
                            ).decode("ascii")
