"""Vectorised decoding of RLlib's per-step buffers straight from the msgpack bytes.

RLlib's recorder stores every buffer as a list of per-step items: one msgpack-numpy map per
observation (`{b'nd', b'type', b'kind', b'shape', b'data'}`), per action, per float. Unpacking
them builds a Python dict per step, which is most of the cost of reading RLlib's files. Here
the top level of an episode row is walked in Python (a few dozen headers), each buffer's
`data` list is checked to be `n` items of identical bytes apart from their payload (one numpy
comparison), and its payloads become one array by a strided view. The lists found are cut out
of the row and replaced by a placeholder ext value, and the rest is unpacked by msgpack at C
speed. A row that does not fit this pattern returns None and is decoded the general way.

Safety is unchanged: the first item is validated like any other (dtype, kind, shape, byte
length), and every other item is byte-for-byte the same header, so the same checks hold.
"""

from __future__ import annotations

import os
import re
import struct

import msgpack
import numpy as np

#: Ext type code of our placeholders; the payload carries a per-call nonce, so an ext value
#: planted in a file can never pick up one of our arrays.
_EXT_CODE = 117
_BUFFER_KEYS = (b"\xacobservations", b"\xa7actions", b"\xa7rewards")
_EMO_KEY = b"\xb3extra_model_outputs"
_DATA_KEY = b"\xa4data"
#: A buffer's `data` key followed by a non-empty list whose first item is a msgpack-numpy map
#: or a float: a per-step list worth scanning. Finalized rows (one array a buffer) never match,
#: even where their `infos` stay a list (of maps that are empty).
_PER_STEP_LIST = re.compile(rb"\xa4data(?:[\x91-\x9f]|\xdc[\s\S]{2}|\xdd[\s\S]{4})"
                            rb"[\x81-\x8f\xcb]")
#: msgpack values of one byte (fixints, empty map/array/str, nil, bools).
_ONE_BYTE = np.zeros(256, bool)
_ONE_BYTE[list(range(0x00, 0x80)) + [0x80, 0x90, 0xa0, 0xc0, 0xc2, 0xc3]
          + list(range(0xe0, 0x100))] = True


class _NoFit(Exception):
    pass


def _header(b: bytes, i: int) -> tuple[int, int, int]:
    """(kind, count or length, offset after the header); kind 0 scalar/str/bin, 1 array,
    2 map. For kind 0, `count` is the number of payload bytes after the header."""
    c = b[i]
    if c <= 0x7f or c >= 0xe0 or c in (0xc0, 0xc2, 0xc3):
        return 0, 0, i + 1
    if 0x80 <= c <= 0x8f:
        return 2, c & 0x0f, i + 1
    if 0x90 <= c <= 0x9f:
        return 1, c & 0x0f, i + 1
    if 0xa0 <= c <= 0xbf:
        return 0, c & 0x1f, i + 1
    if c in (0xc4, 0xd9):
        return 0, b[i + 1], i + 2
    if c in (0xc5, 0xda):
        return 0, struct.unpack_from(">H", b, i + 1)[0], i + 3
    if c in (0xc6, 0xdb):
        return 0, struct.unpack_from(">I", b, i + 1)[0], i + 5
    fixed = {0xca: 4, 0xcb: 8, 0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8, 0xd0: 1, 0xd1: 2,
             0xd2: 4, 0xd3: 8, 0xd4: 2, 0xd5: 3, 0xd6: 5, 0xd7: 9, 0xd8: 17}
    if c in fixed:
        return 0, fixed[c], i + 1
    if c == 0xdc:
        return 1, struct.unpack_from(">H", b, i + 1)[0], i + 3
    if c == 0xdd:
        return 1, struct.unpack_from(">I", b, i + 1)[0], i + 5
    if c == 0xde:
        return 2, struct.unpack_from(">H", b, i + 1)[0], i + 3
    if c == 0xdf:
        return 2, struct.unpack_from(">I", b, i + 1)[0], i + 5
    raise _NoFit  # ext types (c7-c9) and the reserved byte c1: leave them to msgpack


def _skip(b: bytes, i: int) -> int:
    """Offset after the msgpack value at `i` (runs of one-byte items skipped at once)."""
    pending = 1
    while pending:
        kind, n, j = _header(b, i)
        pending -= 1
        if kind == 0:
            i = j + n
        elif kind == 1 and n and _ONE_BYTE[np.frombuffer(b, np.uint8, n, j)].all():
            i = j + n
        else:
            i = j
            pending += n * kind
    if i > len(b):
        raise _NoFit
    return i


def _per_step_list(b: bytes, i: int, check_map) -> tuple[np.ndarray, int] | None:
    """The list at `i` as one array when its items share one byte layout, with its end."""
    kind, n, start = _header(b, i)
    if kind != 1 or n == 0:
        return None
    end0 = _skip(b, start)
    size = end0 - start
    first = b[start]
    if first == 0xcb:  # Python floats: msgpack float64, big-endian
        payload, dtype, shape = 8, np.dtype(">f8"), ()
    elif 0x80 <= first <= 0x8f:  # msgpack-numpy maps, payload last
        item = msgpack.unpackb(b[start:end0], raw=False, strict_map_key=False)
        if not isinstance(item, dict) or b"nd" not in item or list(item)[-1:] != [b"data"]:
            return None
        dtype, shape, _ = check_map(item)
        payload = len(item[b"data"])
    else:
        return None
    end = start + n * size
    if end > len(b):
        return None
    rows = np.frombuffer(b, np.uint8, n * size, start).reshape(n, size)
    head = rows[:, :size - payload]
    if not (head == head[0]).all():
        return None
    data = np.ascontiguousarray(rows[:, size - payload:]).view(dtype).reshape((n, *shape))
    return data.astype(dtype.newbyteorder("="), copy=False), end


def decode_with_scan(blob: bytes, check_map, decode_tree) -> dict | None:
    """Decodes one episode row with its per-step lists vectorised; None when it does not fit
    the pattern (the caller then decodes it the general way).

    Args:
      blob: the row's bytes.
      check_map: validates one msgpack-numpy map and returns its dtype, shape and whether
        it is an array (raises on a refused one).
      decode_tree: `(state, stack_lists) -> state`, the general decoder, applied to the
        rest of the row.
    """
    blob = bytes(blob)
    if _PER_STEP_LIST.search(blob) is None:  # nothing to scan: a walk would find no list
        return None
    try:
        return _decode(blob, check_map, decode_tree)
    except (_NoFit, ValueError, IndexError, struct.error):
        return None  # malformed or unusual: the general decoder names the problem


def _decode(b: bytes, check_map, decode_tree) -> dict | None:
    kind, n, i = _header(b, 0)
    if kind != 2:
        return None
    cuts: list[tuple[int, int, np.ndarray]] = []

    def buffer_at(i: int) -> int:
        kind, m, j = _header(b, i)
        if kind != 2:
            return _skip(b, i)
        i = j
        for _ in range(m):
            k_end = _skip(b, i)
            is_data = b[i:k_end] == _DATA_KEY
            if is_data:
                found = _per_step_list(b, k_end, check_map)
                if found is not None:
                    cuts.append((k_end, found[1], found[0]))
                    i = found[1]
                    continue
            i = _skip(b, k_end)
        return i

    for _ in range(n):
        k_end = _skip(b, i)
        key = b[i:k_end]
        if key in _BUFFER_KEYS:
            i = buffer_at(k_end)
        elif key == _EMO_KEY and _header(b, k_end)[0] == 2:
            _, m, i = _header(b, k_end)
            for _ in range(m):
                i = buffer_at(_skip(b, i))
        else:
            i = _skip(b, k_end)
    if i != len(b) or not cuts:
        return None
    nonce = os.urandom(8)
    parts, pos = [], 0
    for idx, (s, e, _) in enumerate(cuts):
        placeholder = msgpack.ExtType(_EXT_CODE, nonce + idx.to_bytes(4, "big"))
        parts += [b[pos:s], msgpack.packb(placeholder)]
        pos = e
    parts.append(b[pos:])

    def ext_hook(code, data):
        idx = int.from_bytes(data[8:], "big")
        if code != _EXT_CODE or len(data) != 12 or data[:8] != nonce or idx >= len(cuts):
            raise _NoFit
        return cuts[idx][2]

    state = msgpack.unpackb(b"".join(parts), raw=False, strict_map_key=False,
                            ext_hook=ext_hook)
    return decode_tree(state, True)
