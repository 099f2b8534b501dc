"""RLlib's lookback-buffer rules for multi-agent reads: one per-step list, an optional item
that is not stored yet (an agent's hanging action, reward or model output) and the env-step map.

`MultiAgentEpisode` reads an agent's data at env steps through its env-step map
(`env_t_to_agent_t`), whose entries are agent steps or the skip tag `"S"`. RLlib resolves those
reads with its `InfiniteLookbackBuffer.get` on Python lists plus two private options: drop the
last stored item (`ignore_last`: actions, rewards and model outputs have no value at the last
env step) and append a not-yet-stored one (`add_last`: the hanging value). `get` here follows
those rules, corner cases included (fills at both ends of a slice, `neg_index_as_lookback` on a
negative position), so that our getters give RLlib's answers; the single-agent `Episode` keeps
its own array-based `episode.lookback`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_NONE = object()  # "no add_last item" (None can be a legitimate stored value)
_FAR_LEFT = -(1 << 40)


def interpret_slice(s: slice, lookback: int, n_incl: int, neg: bool) -> tuple:
    """`(start, stop, step, length, fill_left, fill_right)` of a slice on `n_incl` items of
    which the first `lookback` are lookback (RLlib's bounds and fill counts).

    Args:
      s: the slice.
      lookback: the lookback items.
      n_incl: all items, lookback included.
      neg: negative indices count into the lookback (`neg_index_as_lookback`).
    """
    start, stop = s.start, s.stop
    if start is None:
        start = lookback
    elif start < 0:
        start = lookback + start if neg else n_incl + start
    else:
        start = lookback + start
    if stop is None:
        stop = n_incl
    elif stop < 0:
        stop = lookback + stop if neg else n_incl + stop
    else:
        stop = lookback + stop
    left = right = 0
    if start < 0 and stop < 0:
        left, start, stop = abs(start - stop), 0, 0
    elif start >= n_incl and stop >= n_incl:
        right, start, stop = abs(start - stop), n_incl, n_incl
    elif start < 0:
        left, start = -start, 0
    elif stop >= n_incl:
        right, stop = stop - n_incl, n_incl
    elif stop < 0:
        if start >= n_incl:
            left, start = start - n_incl + 1, n_incl - 1
        right, stop = -stop - 1, _FAR_LEFT
    step = 1 if s.step is None else s.step
    length = max(0, (stop - start + (step - (1 if step > 0 else -1))) // step)
    return start, stop, step, length, left, right


class Buffer:
    """A read-only view of one per-step list with RLlib's lookback rules.

    Args:
      items: the stored items, lookback first.
      lookback: how many of them are lookback (clipped to `len(items)`, as RLlib does).
      fill_item: makes the item that `fill=value` puts in a missing position.
    """

    __slots__ = ("items", "lookback", "fill_item")

    def __init__(self, items: list, lookback: int, fill_item: Callable[[Any], Any] | None = None):
        self.items = items
        self.lookback = min(int(lookback), len(items))
        self.fill_item = fill_item or (lambda v: v)

    def __len__(self) -> int:
        return max(len(self.items) - self.lookback, 0)

    def _data(self, ignore_last: bool, add_last: Any) -> list:
        data = self.items[:-1] if ignore_last else self.items
        if add_last is not _NONE:
            data = list(data) + [add_last]
        return data

    def get(self, indices=None, *, neg: bool = False, fill: Any = None,
            ignore_last: bool = False, add_last: Any = _NONE) -> Any:
        """RLlib's `InfiniteLookbackBuffer.get` on a list (an item, or a list of items)."""
        if indices is None:
            # RLlib reads everything through `self[:-1]` or `self[:]`: no add_last, no fill.
            stop = -1 if ignore_last else None
            return self._slice(slice(None, stop), neg=False, fill=None, ignore_last=False,
                               add_last=_NONE)
        if isinstance(indices, slice):
            return self._slice(indices, neg=neg, fill=fill, ignore_last=ignore_last,
                               add_last=add_last)
        if isinstance(indices, list):
            return [self._int(i, neg, fill, ignore_last, add_last) for i in indices]
        return self._int(indices, neg, fill, ignore_last, add_last)

    def _int(self, idx: int, neg: bool, fill: Any, ignore_last: bool, add_last: Any) -> Any:
        data = self._data(ignore_last, add_last)
        if idx >= 0 or neg:
            idx = self.lookback + idx
        if neg and idx < 0:
            idx = len(self) + self.lookback - int(ignore_last)
        try:
            return data[idx]
        except IndexError:
            if fill is None:
                raise IndexError(f"index {idx} is out of range ({len(data)} items, "
                                 f"lookback {self.lookback})") from None
            return self.fill_item(fill)

    def _slice(self, s: slice, *, neg: bool, fill: Any, ignore_last: bool,
               add_last: Any) -> list:
        data = self._data(ignore_last, add_last)
        n_incl = len(self.items) + int(add_last is not _NONE) - int(ignore_last)
        start, stop, step, length, left, right = interpret_slice(s, self.lookback, n_incl, neg)
        stop_ = None if stop == _FAR_LEFT else stop
        if stop == _FAR_LEFT:
            out = []
        else:
            out = data[start:stop_:step] if length > 0 else None
        if fill is not None and (left or right):
            item = self.fill_item(fill)
            return [item] * left + (out or []) + [item] * right
        if out is None:
            return data[start:stop_:step] if stop != _FAR_LEFT else []
        return out


def map_get(data: list, lookback: int, indices, *, neg: bool, fill: Any,
            ignore_last: bool) -> Any:
    """Reads the env-step map (entries: agent steps or `"S"`).

    Args:
      data: the map's entries, lookback first.
      lookback: the lookback entries.
      indices: an int, a list or a slice.
      neg: negative indices count into the lookback.
      fill: the value for positions outside the map.
      ignore_last: drop the map's last entry before reading (RLlib's `ignore_last`).
    """
    return Buffer(data, lookback).get(indices, neg=neg, fill=fill, ignore_last=ignore_last)


NO_VALUE = _NONE
