"""Episode rows: `msgpack` of `Episode.get_state()` with msgpack-numpy's array encoding.

Encoding is byte-compatible with RLlib (msgpack-numpy's layout: `{b'nd', b'type', b'kind',
b'shape', b'data'}` maps). Decoding uses our own object hook instead of
`msgpack_numpy.decode`, because that one calls `pickle.loads` for object arrays: here a
payload holding an object or void array is refused (nothing in it runs), and a declared shape
that disagrees with the byte length, or an absurdly large array, is refused before allocating.
"""

from __future__ import annotations

import math
from typing import Any

import msgpack
import numpy as np

from rljax_offline.data.errors import OfflineDataError
from rljax_offline.episode import Episode, EpisodeError

#: Arrays above this many bytes are refused (a corrupt header must not allocate gigabytes).
MAX_ARRAY_BYTES = 1 << 31


class _Refused(Exception):
    pass


def _np_default(obj: Any) -> Any:
    """msgpack `default`: numpy arrays and scalars in msgpack-numpy's exact map layout."""
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "OV":
            raise TypeError(f"cannot encode an array of dtype {obj.dtype} (object and "
                            "structured arrays would need pickle)")
        return {b"nd": True, b"type": obj.dtype.str, b"kind": b"", b"shape": obj.shape,
                b"data": np.ascontiguousarray(obj).tobytes()}
    if isinstance(obj, np.generic):
        if obj.dtype.kind in "OV":
            raise TypeError(f"cannot encode a numpy scalar of dtype {obj.dtype}")
        return {b"nd": False, b"type": obj.dtype.str, b"data": obj.tobytes()}
    if isinstance(obj, complex):
        return {b"complex": True, b"data": repr(obj)}
    raise TypeError(f"cannot encode {type(obj).__name__}")


def _safe_dtype(type_str: Any) -> np.dtype:
    if not isinstance(type_str, (str, bytes)):
        raise _Refused(f"array type must be a dtype string, got {type(type_str).__name__}")
    if isinstance(type_str, bytes):
        type_str = type_str.decode("ascii", "replace")
    try:
        dtype = np.dtype(type_str)
    except TypeError as e:
        raise _Refused(f"unknown dtype {type_str!r}") from e
    if dtype.kind in "OV" or dtype.fields is not None or dtype.subdtype is not None:
        raise _Refused(f"dtype {type_str!r} is refused: object/structured arrays are decoded "
                       "by pickle, which could run code from the file")
    return dtype


def _object_hook(obj: dict) -> Any:
    if b"nd" not in obj:
        if b"complex" in obj:
            try:
                return complex(obj[b"data"])
            except (TypeError, ValueError) as e:
                raise _Refused(f"malformed complex number {obj[b'data']!r}") from e
        return obj
    kind = obj.get(b"kind", b"")
    if kind not in (b"", ""):
        raise _Refused(f"array of kind {kind!r} is refused: msgpack-numpy pickles object and "
                       "structured arrays, and unpickling could run code from the file")
    dtype = _safe_dtype(obj.get(b"type"))
    data = obj.get(b"data")
    if not isinstance(data, (bytes, bytearray)):
        raise _Refused("array payload 'data' must be bytes")
    if obj[b"nd"]:
        shape = obj.get(b"shape")
        if not isinstance(shape, (list, tuple)) or not all(
                isinstance(s, int) and s >= 0 for s in shape):
            raise _Refused(f"array shape must be a list of ints >= 0, got {shape!r}")
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > MAX_ARRAY_BYTES:
            raise _Refused(f"array of shape {tuple(shape)} and dtype {dtype} would need "
                           f"{nbytes} bytes; refused (limit {MAX_ARRAY_BYTES})")
        if nbytes != len(data):
            raise _Refused(f"array of shape {tuple(shape)} and dtype {dtype} needs {nbytes} "
                           f"bytes but the payload has {len(data)}")
        return np.frombuffer(data, dtype=dtype).reshape(shape)
    if len(data) != dtype.itemsize:
        raise _Refused(f"scalar of dtype {dtype} needs {dtype.itemsize} bytes, payload has "
                       f"{len(data)}")
    return np.frombuffer(data, dtype=dtype)[0]


def encode_state(state: dict) -> bytes:
    """msgpack bytes of an episode state dict (RLlib's wire format)."""
    return msgpack.packb(state, default=_np_default, use_bin_type=True)


def decode_state(blob: bytes, *, file: str | None = None, row: int | None = None) -> dict:
    """Safely decodes msgpack bytes into a state dict (never unpickles)."""
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise OfflineDataError(f"episode payload must be bytes, got {type(blob).__name__}",
                               file=file, row=row)
    try:
        state = msgpack.unpackb(blob, object_hook=_object_hook, raw=False,
                                strict_map_key=False)
    except _Refused as e:
        raise OfflineDataError(f"unsafe or malformed episode payload: {e}", file=file,
                               row=row) from None
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError,
            TypeError) as e:
        raise OfflineDataError(f"episode payload is not valid msgpack: {e}", file=file,
                               row=row) from None
    if not isinstance(state, dict):
        raise OfflineDataError(f"episode payload must decode to a dict, got "
                               f"{type(state).__name__}", file=file, row=row)
    return state


def encode_episode(episode: Episode, *, finalized: bool = True) -> bytes:
    """One episode row. `finalized=False` writes RLlib recorder's per-step lists exactly."""
    return encode_state(episode.get_state(finalized=finalized))


def decode_episode(blob: bytes, *, file: str | None = None, row: int | None = None) -> Episode:
    """One episode row back into an `Episode`, with errors naming file and row."""
    state = decode_state(blob, file=file, row=row)
    try:
        return Episode.from_state(state)
    except (EpisodeError, KeyError, TypeError) as e:
        raise OfflineDataError(f"not a valid episode state: {e}", file=file, row=row) from None
