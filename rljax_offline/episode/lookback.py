"""RLlib's lookback-buffer index rules, written once for arrays and for Python lists.

A buffer holds `n` items; the first `lookback` belong to the previous chunk, so index 0 is
`data[lookback]`. The rules follow RLlib's `InfiniteLookbackBuffer.get`:

* `None`: every item after the lookback buffer.
* int `i >= 0`: `data[lookback + i]`. Negative `i`: from the end of the whole buffer
  (lookback included), or, with `neg_index_as_lookback=True`, `data[lookback + i]`
  (left into the lookback buffer). One item comes back, never a batch of one.
* list of ints: each resolved as an int, stacked along axis 0.
* slice: bounds resolved as ints (None start = `lookback`, None stop = `n`). Positions outside
  the data are dropped (as Python slicing does) or, with `fill=`, filled with that value in the
  item's shape and dtype. Steps must be positive.
* An int or list index outside the data raises `IndexError` unless `fill` is given.

The planner turns an index into a `Plan` (pure Python, no data touched); `take_array` and
`take_list` realise a plan. Plans are made from static Python values, so `take_array` works on
traced arrays inside `jax.jit`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

import jax
import jax.numpy as jnp
import numpy as np

Index = Union[None, int, list, tuple, slice]


@dataclass(frozen=True)
class Plan:
    """What to take: `segments` is a sequence of `(start, stop, step)` data ranges or
    `("fill", count)` runs, in output order; `single` means one item, not a batch.

    Attributes:
      segments: the ranges and fill runs, in output order.
      single: one item (an int index), not a batch.
      length: the number of items the plan yields.
    """

    segments: tuple
    single: bool
    length: int


def _int_position(idx: int, n: int, lookback: int, neg_index_as_lookback: bool) -> int | None:
    pos = lookback + idx if (idx >= 0 or neg_index_as_lookback) else n + idx
    return pos if 0 <= pos < n else None


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def plan(indices: Index, n: int, lookback: int, *, neg_index_as_lookback: bool = False,
         fill: Any = None, what: str = "items") -> Plan:
    """Resolves `indices` against a buffer of `n` items whose first `lookback` are lookback.

    Args:
      indices: None (every step), an int, a list or tuple of ints, or a slice.
      n: the buffer's items, lookback included.
      lookback: how many of them are lookback.
      neg_index_as_lookback: negative indices count back into the lookback from the first
        step, not from the end (RLlib's flag).
      fill: the value for positions outside the data (None: such indices are an error).
      what: the buffer's name, for errors.
    """
    if indices is None:
        return Plan(((lookback, n, 1),), False, max(n - lookback, 0))
    if _is_int(indices):
        pos = _int_position(int(indices), n, lookback, neg_index_as_lookback)
        if pos is None:
            if fill is None:
                raise IndexError(
                    f"index {int(indices)} is out of range for {what}: {n - lookback} in the "
                    f"episode plus {lookback} in the lookback buffer "
                    f"(neg_index_as_lookback={neg_index_as_lookback}); pass fill= to pad")
            return Plan((("fill", 1),), True, 1)
        return Plan(((pos, pos + 1, 1),), True, 1)
    if isinstance(indices, (list, tuple, np.ndarray)):
        segments = []
        for raw in list(indices):
            if not _is_int(raw):
                raise TypeError(f"indices for {what} must be ints, got {type(raw).__name__}")
            pos = _int_position(int(raw), n, lookback, neg_index_as_lookback)
            if pos is None:
                if fill is None:
                    raise IndexError(
                        f"index {int(raw)} is out of range for {what}: {n - lookback} in the "
                        f"episode plus {lookback} in the lookback buffer; pass fill= to pad")
                segments.append(("fill", 1))
            else:
                segments.append((pos, pos + 1, 1))
        return Plan(tuple(_merge(segments)) or ((0, 0, 1),), False, len(segments))
    if isinstance(indices, slice):
        step = 1 if indices.step is None else int(indices.step)
        if step <= 0:
            raise NotImplementedError(f"slice steps must be positive, got {step}")

        def bound(b, default):
            if b is None:
                return default
            b = int(b)
            if b >= 0 or neg_index_as_lookback:
                return lookback + b
            return n + b

        start, stop = bound(indices.start, lookback), bound(indices.stop, n)
        positions = range(start, stop, step)
        if not positions:
            return Plan(((0, 0, 1),), False, 0)
        if fill is None:
            first = next((p for p in positions if p >= 0), None)
            if first is None or first >= n:
                return Plan(((0, 0, 1),), False, 0)
            last = min(stop, n)
            count = len(range(first, last, step))
            return Plan(((first, last, step),), False, count)
        left = sum(1 for _ in range(start, min(stop, 0), step)) if start < 0 else 0
        inner_first = start + left * step
        inner = range(inner_first, min(stop, n), step) if inner_first < n else range(0)
        right = len(positions) - left - len(inner)
        segments = []
        if left:
            segments.append(("fill", left))
        if len(inner):
            segments.append((inner.start, inner.stop, step))
        if right:
            segments.append(("fill", right))
        return Plan(tuple(segments) or ((0, 0, 1),), False, len(positions))
    raise TypeError(f"indices for {what} must be None, an int, a list of ints or a slice; "
                    f"got {type(indices).__name__}")


def _merge(segments: list) -> list:
    """Joins adjacent single-position segments into ranges (fewer gathers, same result)."""
    out: list = []
    for seg in segments:
        if out and seg[0] != "fill" and out[-1][0] != "fill" and out[-1][1] == seg[0] \
                and out[-1][2] == 1:
            out[-1] = (out[-1][0], seg[1], 1)
        elif out and seg[0] == "fill" and out[-1][0] == "fill":
            out[-1] = ("fill", out[-1][1] + seg[1])
        else:
            out.append(seg)
    return out


def _xp(leaf):
    return jnp if isinstance(leaf, jax.Array) else np


def take_array(data: Any, p: Plan, fill: Any = None) -> Any:
    """Realises a plan on a pytree of arrays with a leading item axis.

    Args:
      data: the pytree of arrays.
      p: the plan.
      fill: the value of filled positions.
    """

    def take_leaf(leaf):
        xp = _xp(leaf)
        parts = []
        for seg in p.segments:
            if seg[0] == "fill":
                parts.append(xp.full((seg[1], *leaf.shape[1:]), fill, dtype=leaf.dtype))
            else:
                parts.append(leaf[seg[0]:seg[1]:seg[2]])
        out = parts[0] if len(parts) == 1 else xp.concatenate(parts, axis=0)
        return out[0] if p.single else out

    return jax.tree_util.tree_map(take_leaf, data)


def take_list(items: list, p: Plan, fill: Any = None, fill_item: Any = None) -> list:
    """Realises a plan on a Python list; `fill_item` is what one filled position holds.

    Args:
      items: the list.
      p: the plan.
      fill: the value of filled positions.
      fill_item: what one filled position holds (default: `fill`).
    """
    out: list = []
    for seg in p.segments:
        if seg[0] == "fill":
            out.extend([fill_item] * seg[1])
        else:
            out.extend(items[seg[0]:seg[1]:seg[2]])
    return out


def positions(p: Plan) -> list[int | None]:
    """The absolute positions a plan reads (None for a filled position), in output order.

    Args:
      p: the plan.
    """
    out: list[int | None] = []
    for seg in p.segments:
        if seg[0] == "fill":
            out.extend([None] * seg[1])
        else:
            out.extend(range(seg[0], seg[1], seg[2]))
    return out
