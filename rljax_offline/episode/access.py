"""`EpisodeAccess`: RLlib's getters and setters of an `Episode` (`get_*`, `set_*`), written
once over its lookback-holding buffers with `episode.lookback`'s index rules (`None`, ints,
lists, slices, `neg_index_as_lookback`, `fill`).

Kept apart from `episode.py`, which is the data type (construction, validation against spaces,
the immutable pytree, chunks, state): this is the read/write surface that connectors and
algorithms use, and where an index means a step of the chunk rather than a row of the array.
A setter returns a new episode through the host class's `_with`, as `Episode` is immutable.
"""

from __future__ import annotations

from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.episode import lookback as lb
from rljax_offline.errors import EpisodeError
from rljax_offline.tree_util import stack_items

_Ep = TypeVar("_Ep", bound="EpisodeAccess")  # the host class: a setter returns a new one


def as_data(data: Any, spec: sp.SpaceSpec | None, what: str) -> Any:
    """Lists hold per-step items (RLlib's non-finalized layout); anything else is stacked.

    Args:
      data: a list of per-step items, or arrays (pytrees) with the step on axis 0.
      spec: the space's spec (structures the stacking of Dict/Tuple items; None: as given).
      what: the field's name, for errors.
    """
    if data is None or (isinstance(data, list) and not data):
        if spec is not None:
            return sp.empty_data(spec)
        return np.zeros((0,), np.float64 if what == "rewards" else np.float32)
    if isinstance(data, list):
        return stack_items(data, what)
    return jax.tree_util.tree_map(
        lambda x: x if isinstance(x, (jax.Array, np.ndarray)) else np.asarray(x), data)


def num_items(data: Any) -> int:
    """The leading (item) axis of a pytree of arrays.

    Args:
      data: the pytree.
    """
    return jax.tree_util.tree_leaves(data)[0].shape[0]


def _set_items(data: Any, n: int, lookback: int, new_data: Any, at_indices: Any,
               neg_index_as_lookback: bool, what: str) -> Any:
    """Returns `data` with the items at `at_indices` replaced (RLlib's buffer `set` rules)."""
    if at_indices is None:
        at_indices = slice(None, None)
    if isinstance(at_indices, slice):
        p = lb.plan(at_indices, n, lookback, neg_index_as_lookback=neg_index_as_lookback,
                    what=what)
        count = p.length
        new_data = as_data(new_data, None, what) if isinstance(new_data, list) else new_data
        new_data = jax.tree_util.tree_map(
            lambda x: x if isinstance(x, (jax.Array, np.ndarray)) else np.asarray(x), new_data)
        shapes = [np.shape(x) for x in jax.tree_util.tree_leaves(new_data)]
        new_len = shapes[0][0] if shapes and shapes[0] else 0
        if new_len != count:
            raise IndexError(f"cannot set {what} at {at_indices}: the slice holds {count} "
                             f"items but new_data has {new_len}")
        index: Any = slice(*p.segments[0])
    elif isinstance(at_indices, (list, tuple)):
        if isinstance(new_data, list):
            new_data = as_data(new_data, None, what)
        index = np.asarray([lb.positions(lb.plan(int(i), n, lookback,
                                                 neg_index_as_lookback=neg_index_as_lookback,
                                                 what=what))[0] for i in at_indices], np.int64)
    else:
        index = lb.positions(lb.plan(at_indices, n, lookback,
                                     neg_index_as_lookback=neg_index_as_lookback, what=what))[0]

    def set_leaf(leaf, new):
        if isinstance(leaf, jax.Array):
            return leaf.at[index].set(jnp.asarray(new, leaf.dtype))
        out = np.array(leaf, copy=True)
        try:
            out[index] = new
        except ValueError as e:
            raise EpisodeError(f"cannot set {what}: new_data does not fit: {e}") from e
        return out

    try:
        return jax.tree_util.tree_map(set_leaf, data, new_data)
    except ValueError as e:
        if isinstance(e, EpisodeError):
            raise
        raise EpisodeError(f"cannot set {what}: new_data's structure does not match: {e}") from e


class EpisodeAccess:
    """The `get_*` / `set_*` methods of `Episode`; see the module docstring. The host class
    provides the array fields, `len_lookback_buffer`, `infos`, `_n_obs` and `_with`."""

    __slots__ = ()

    # ------------------------------------------------------------------ getters

    def _get(self, data, n, indices, neg_index_as_lookback, fill, what):
        p = lb.plan(indices, n, self.len_lookback_buffer,
                    neg_index_as_lookback=neg_index_as_lookback, fill=fill, what=what)
        return lb.take_array(data, p, fill)

    def get_observations(self, indices=None, *, neg_index_as_lookback: bool = False,
                         fill: Any = None) -> Any:
        """Observations at `indices` (see `rljax_offline.episode.lookback` for the index rules)."""
        return self._get(self.observations, self._n_obs, indices, neg_index_as_lookback,
                         fill, "observations")

    def get_actions(self, indices=None, *, neg_index_as_lookback: bool = False,
                    fill: Any = None) -> Any:
        return self._get(self.actions, num_items(self.actions), indices,
                         neg_index_as_lookback, fill, "actions")

    def get_rewards(self, indices=None, *, neg_index_as_lookback: bool = False,
                    fill: Any = None) -> Any:
        return self._get(self.rewards, num_items(self.rewards), indices,
                         neg_index_as_lookback, fill, "rewards")

    def get_extra_model_outputs(self, key: str | None = None, indices=None, *,
                                neg_index_as_lookback: bool = False, fill: Any = None) -> Any:
        """One extra model output (or, with `key=None`, a dict of all of them)."""
        if key is None:
            return {k: self.get_extra_model_outputs(k, indices,
                                                    neg_index_as_lookback=neg_index_as_lookback,
                                                    fill=fill)
                    for k in self.extra_model_outputs}
        if key not in self.extra_model_outputs:
            raise KeyError(f"no extra model output {key!r}; this episode has "
                           f"{sorted(self.extra_model_outputs)}")
        data = self.extra_model_outputs[key]
        return self._get(data, num_items(data), indices, neg_index_as_lookback, fill,
                         f"extra_model_outputs[{key!r}]")

    def get_infos(self, indices=None, *, neg_index_as_lookback: bool = False,
                  fill: Any = None) -> Any:
        infos = self.infos
        p = lb.plan(indices, len(infos), self.len_lookback_buffer,
                    neg_index_as_lookback=neg_index_as_lookback, fill=fill, what="infos")
        out = lb.take_list(list(infos), p, fill, fill)
        return out[0] if p.single else out

    def get_return(self) -> Any:
        """Sum of this chunk's rewards (the lookback buffer excluded)."""
        r = self.rewards[self.len_lookback_buffer:]
        return r.sum() if isinstance(r, jax.Array) else float(np.sum(r))

    # ------------------------------------------------------------------ setters (new episodes)

    def set_observations(self: _Ep, *, new_data, at_indices=None,
                         neg_index_as_lookback: bool = False) -> _Ep:
        obs = _set_items(self.observations, self._n_obs, self.len_lookback_buffer, new_data,
                         at_indices, neg_index_as_lookback, "observations")
        return self._with(observations=obs)

    def set_actions(self: _Ep, *, new_data, at_indices=None,
                    neg_index_as_lookback: bool = False) -> _Ep:
        act = _set_items(self.actions, num_items(self.actions), self.len_lookback_buffer,
                         new_data, at_indices, neg_index_as_lookback, "actions")
        return self._with(actions=act)

    def set_rewards(self: _Ep, *, new_data, at_indices=None,
                    neg_index_as_lookback: bool = False) -> _Ep:
        rew = _set_items(self.rewards, num_items(self.rewards), self.len_lookback_buffer,
                         new_data, at_indices, neg_index_as_lookback, "rewards")
        return self._with(rewards=rew)

    def set_extra_model_outputs(self: _Ep, *, key: str, new_data, at_indices=None,
                                neg_index_as_lookback: bool = False) -> _Ep:
        if key not in self.extra_model_outputs:
            raise KeyError(f"no extra model output {key!r}; this episode has "
                           f"{sorted(self.extra_model_outputs)}")
        data = self.extra_model_outputs[key]
        new = _set_items(data, num_items(data), self.len_lookback_buffer, new_data,
                         at_indices, neg_index_as_lookback, f"extra_model_outputs[{key!r}]")
        return self._with(extra_model_outputs={**self.extra_model_outputs, key: new})
