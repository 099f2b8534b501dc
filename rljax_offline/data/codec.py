"""Episode rows: `msgpack` of `Episode.get_state()` with msgpack-numpy's array encoding.

Encoding is byte-compatible with RLlib (msgpack-numpy's layout: `{b'nd', b'type', b'kind',
b'shape', b'data'}` maps). Decoding uses our own object hook instead of
`msgpack_numpy.decode`, because that one calls `pickle.loads` for object arrays: here a
payload holding an object or void array is refused (nothing in it runs), and a declared shape
that disagrees with the byte length, or an absurdly large array, is refused before allocating.
"""

from __future__ import annotations

import functools
import math
import operator
from typing import Any

import msgpack
import numpy as np

from rljax_offline.data.msgpack_scan import decode_with_scan
from rljax_offline.episode.episode import Episode, EpisodeError
from rljax_offline.errors import OfflineDataError, UnsafePayloadError

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


@functools.lru_cache(maxsize=256)
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


def _check_map(obj: dict) -> tuple:
    """Validates one msgpack-numpy map; returns its dtype, shape and whether it is an array."""
    kind = obj.get(b"kind", b"")
    if kind != b"" and kind != "":
        raise _Refused(f"array of kind {kind!r} is refused: msgpack-numpy pickles object and "
                       "structured arrays, and unpickling could run code from the file")
    dtype = _safe_dtype(obj.get(b"type"))
    data = obj.get(b"data")
    if type(data) is not bytes:
        raise _Refused("array payload 'data' must be bytes")
    if not obj.get(b"nd"):
        if len(data) != dtype.itemsize:
            raise _Refused(f"scalar of dtype {dtype} needs {dtype.itemsize} bytes, payload has "
                           f"{len(data)}")
        return dtype, (), False
    shape = obj.get(b"shape")
    if type(shape) is not list or not all(type(d) is int and d >= 0 for d in shape):
        raise _Refused(f"array shape must be a list of ints >= 0, got {shape!r}")
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > MAX_ARRAY_BYTES:
        raise _Refused(f"array of shape {tuple(shape)} and dtype {dtype} would need "
                       f"{nbytes} bytes; refused (limit {MAX_ARRAY_BYTES})")
    if nbytes != len(data):
        raise _Refused(f"array of shape {tuple(shape)} and dtype {dtype} needs {nbytes} "
                       f"bytes but the payload has {len(data)}")
    return dtype, tuple(shape), True


def _array(obj: dict) -> Any:
    dtype, shape, nd = _check_map(obj)
    if nd:
        return np.frombuffer(obj[b"data"], dtype=dtype).reshape(shape)
    return np.frombuffer(obj[b"data"], dtype=dtype)[0]


_ARRAY_HEADER = operator.itemgetter(b"type", b"kind", b"nd")
_SCALAR_HEADER = operator.itemgetter(b"type", b"nd")
_SHAPE = operator.itemgetter(b"shape")
_DATA = operator.itemgetter(b"data")


def _stacked(items: list) -> Any:
    """One array from a list of same-dtype, same-shape msgpack-numpy maps (RLlib's per-step
    buffers), with one `frombuffer`; None when the items differ.

    The per-item checks run as C-level `map`s over the list (no Python loop per step).
    """
    dtype, shape, nd = _check_map(items[0])
    try:
        if nd:
            same = (len(set(map(_ARRAY_HEADER, items))) == 1
                    and len(set(map(tuple, map(_SHAPE, items)))) == 1)
        else:
            same = len(set(map(_SCALAR_HEADER, items))) == 1
    except (KeyError, TypeError):  # not all maps, or unhashable junk in a header
        return None
    if not same:
        return None
    try:
        joined = b"".join(map(_DATA, items))
    except (KeyError, TypeError):
        raise _Refused("array payload 'data' must be bytes") from None
    per = math.prod(shape) * dtype.itemsize
    if len(joined) != per * len(items):
        raise _Refused(f"per-step arrays of shape {shape} and dtype {dtype} need {per} bytes "
                       "each, but the payloads differ")
    return np.frombuffer(joined, dtype=dtype).reshape((len(items), *shape))


_PLAIN = (int, float, str, bool, type(None), bytes)
_PLAIN_SET = frozenset(_PLAIN)


def _decode_tree(x: Any, stack_lists: bool) -> Any:
    """Decodes msgpack-numpy maps anywhere in `x` ourselves (msgpack itself ran without an
    object hook, at C speed); pickled kinds are refused, never unpickled."""
    t = type(x)
    if t is dict:
        if not x:
            return x
        if b"nd" in x:
            return _array(x)
        if b"complex" in x:
            try:
                return complex(x[b"data"])
            except (TypeError, ValueError) as e:
                raise _Refused(f"malformed complex number {x[b'data']!r}") from e
        return {k: _decode_tree(v, stack_lists) for k, v in x.items()}
    if t is list:
        if not x:
            return x
        head = x[0]
        if type(head) is dict:
            if not head and not any(x):  # lists of empty infos dicts
                return x
            if stack_lists and b"nd" in head:
                arr = _stacked(x)
                if arr is not None:
                    return arr
        elif type(head) in _PLAIN and _PLAIN_SET.issuperset(map(type, x)):
            return x
        return [_decode_tree(v, stack_lists) for v in x]
    return x


def encode_state(state: dict) -> bytes:
    """msgpack bytes of an episode state dict (RLlib's wire format).

    Args:
      state: an `Episode.get_state()` / RLlib `SingleAgentEpisode.get_state()` dict.

    Returns:
      The msgpack bytes (numpy arrays via msgpack-numpy), as RLlib stores them in a row.
    """
    return msgpack.packb(state, default=_np_default, use_bin_type=True)


def decode_state(blob: bytes, *, file: str | None = None, row: int | None = None,
                 stack_lists: bool = False) -> dict:
    """Safely decodes msgpack bytes into a state dict (never unpickles).

    `stack_lists=True` returns per-step lists of arrays as one stacked array (what
    `Episode.from_state` builds anyway, many times faster); False keeps RLlib's exact layout.

    Args:
      blob: the bytes of one episode row.
      file: the file the row comes from, named by errors.
      row: the row's index in that file, named by errors.
      stack_lists: return per-step lists of arrays as one stacked array.

    Returns:
      The state dict.

    Raises:
      UnsafePayloadError: an array msgpack-numpy would unpickle (object dtypes, which
        could run code) or whose header does not match its bytes.
      OfflineDataError: the bytes are not a msgpack state dict.
    """
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise OfflineDataError(f"episode payload must be bytes, got {type(blob).__name__}",
                               file=file, row=row)
    try:
        state = decode_with_scan(blob, _check_map, _decode_tree) if stack_lists else None
        if state is None:
            state = _decode_tree(msgpack.unpackb(blob, raw=False, strict_map_key=False),
                                 stack_lists)
    except _Refused as e:
        raise UnsafePayloadError(f"unsafe or malformed episode payload: {e}", file=file,
                                 row=row) from None
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError,
            TypeError, KeyError, IndexError, OverflowError) as e:
        raise OfflineDataError(f"episode payload is not valid msgpack: {type(e).__name__}: "
                               f"{e}", file=file, row=row) from None
    except (RecursionError, MemoryError) as e:
        raise OfflineDataError(f"episode payload is nested too deeply or too large for its "
                               f"size ({type(e).__name__})", file=file, row=row) from None
    if not isinstance(state, dict):
        raise OfflineDataError(f"episode payload must decode to a dict, got "
                               f"{type(state).__name__}", file=file, row=row)
    return state


def encode_episode(episode: Episode, *, finalized: bool = True) -> bytes:
    """One episode row. `finalized=False` writes RLlib recorder's per-step lists exactly.

    Args:
      episode: the episode to encode.
      finalized: False writes RLlib recorder's per-step lists exactly; True (default) one array
        per buffer, which decodes faster and RLlib reads as well.

    Returns:
      The row's bytes.
    """
    return encode_state(episode.get_state(finalized=finalized))


def decode_episode(blob: bytes, *, file: str | None = None, row: int | None = None) -> Episode:
    """One episode row back into an `Episode`, with errors naming file and row.

    Args:
      blob: the bytes of one episode row.
      file: the file the row comes from, named by errors.
      row: the row's index in that file, named by errors.

    Returns:
      The `Episode`.

    Raises:
      UnsafePayloadError: an array that would be unpickled or does not match its header.
      OfflineDataError: the bytes are no episode state (the error names file and row).
    """
    state = decode_state(blob, file=file, row=row, stack_lists=True)
    try:
        return Episode.from_state(state)
    except (EpisodeError, KeyError, TypeError, ValueError, IndexError, AttributeError,
            OverflowError, RecursionError) as e:
        raise OfflineDataError(f"not a valid episode state: {type(e).__name__}: {e}",
                               file=file, row=row) from None
