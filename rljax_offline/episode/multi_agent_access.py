"""RLlib's multi-agent getters (`get_observations`, `get_actions`, ...) over a
`MultiAgentEpisode`'s per-agent episodes, env-step map and hanging values.

With `env_steps=True` (the default) an index is an env step: each agent's env-step map turns it
into that agent's step, or into the skip tag `"S"` where the agent did not step (left out of
the result, or `fill`ed). Actions, rewards and model outputs at an agent's last observed step
are its hanging values (it acted, no observation came back yet). With `env_steps=False` an
index is the agent's own step. `return_list=True` gives one dict per env step. The rules,
corner cases included, are RLlib 2.60's (see `multi_agent_index`); where RLlib fails on a
request with a plain Python error we answer it (documented in docs/guides/multi-agent-data.md).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.episode.multi_agent_index import NO_VALUE, Buffer, map_get

SKIP = "S"
_LAST_IS_VALUE = ("observations", "infos")  # actions etc. have no value at the last env step


def _stack(values: Any) -> Any:
    """A list of equally shaped numeric items as one array (RLlib's numpy layout)."""
    if not isinstance(values, list) or not values:
        return values
    if all(isinstance(v, (np.ndarray, np.generic, int, float)) and not isinstance(v, bool)
           for v in values):
        shapes = {np.shape(v) for v in values}
        if len(shapes) == 1:
            return np.stack([np.asarray(v) for v in values])
    return values


def _one_hot(item: Any, n: int) -> Any:
    out = np.zeros((n,), np.float32)
    out[int(item)] = 1.0
    return out


class MultiAgentAccess:
    """The getters of `MultiAgentEpisode`; see the module docstring."""

    __slots__ = ()

    # ------------------------------------------------------------------ buffers

    def _buffer(self, agent_id, what: str, key: str | None = None,
                one_hot: bool = False) -> Buffer:
        cache_key = (agent_id, what, key, one_hot)
        buf = self._cache.get(cache_key)
        if buf is not None:
            return buf
        ep = self.agent_episodes[agent_id]
        if what == "infos":
            items = list(ep.infos)
        else:
            if what == "extra_model_outputs" and key not in ep.extra_model_outputs \
                    and _n_items(ep, "actions") == 0:
                items = []  # an agent that has not acted yet has no model outputs
            else:
                data = ep.extra_model_outputs[key] if what == "extra_model_outputs" else \
                    getattr(ep, what)
                items = _items(data)
        fill_item = self._fill_maker(agent_id, what, one_hot)
        if one_hot:
            n = self._discrete_n(agent_id)
            items = [_one_hot(x, n) for x in items]
        buf = Buffer(items, ep.len_lookback_buffer, fill_item)
        self._cache[cache_key] = buf
        return buf

    def _discrete_n(self, agent_id) -> int:
        spec = sp.to_spec(self.action_space.get(agent_id))
        if not isinstance(spec, sp.DiscreteSpec):
            raise ValueError(f"one_hot_discrete needs a Discrete action space for agent "
                             f"{agent_id!r}, got {spec}")
        return int(spec.n)

    def _fill_maker(self, agent_id, what: str, one_hot: bool):
        if what == "rewards":
            return lambda v: np.float32(v)
        space = {"observations": self.observation_space,
                 "actions": self.action_space}.get(what, {}).get(agent_id)
        if space is None:
            return lambda v: v
        if one_hot:
            n = self._discrete_n(agent_id)
            return lambda v: np.full((n,), v, np.float32)
        spec = sp.to_spec(space)
        template = sp.empty_data(spec, 1)

        def make(v):
            return jax.tree_util.tree_map(lambda x: np.full(x.shape[1:], v, x.dtype), template)
        return make

    def _hanging(self, what: str, agent_id) -> Any:
        if what == "actions":
            return self.hanging_actions_end.get(agent_id, NO_VALUE)
        if what == "extra_model_outputs":
            return self.hanging_extra_model_outputs_end.get(agent_id, NO_VALUE)
        if what == "rewards":
            return self.hanging_rewards_end.get(agent_id, NO_VALUE)
        return NO_VALUE

    def _map(self, agent_id, indices, *, neg, fill, ignore_last):
        return map_get(list(self.env_t_to_agent_t[agent_id]), self.map_lookback[agent_id],
                       indices, neg=neg, fill=fill, ignore_last=ignore_last)

    # ------------------------------------------------------------------ public getters

    def get_observations(self, indices=None, agent_ids=None, *, env_steps: bool = True,
                         neg_index_as_lookback: bool = False, fill: Any = None,
                         one_hot_discrete: bool = False, return_list: bool = False):
        return self._get("observations", indices, agent_ids, env_steps,
                         neg_index_as_lookback, fill, False, return_list, None)

    def get_infos(self, indices=None, agent_ids=None, *, env_steps: bool = True,
                  neg_index_as_lookback: bool = False, fill: Any = None,
                  return_list: bool = False):
        return self._get("infos", indices, agent_ids, env_steps, neg_index_as_lookback, fill,
                         False, return_list, None)

    def get_actions(self, indices=None, agent_ids=None, *, env_steps: bool = True,
                    neg_index_as_lookback: bool = False, fill: Any = None,
                    one_hot_discrete: bool = False, return_list: bool = False):
        return self._get("actions", indices, agent_ids, env_steps, neg_index_as_lookback,
                         fill, one_hot_discrete, return_list, None)

    def get_rewards(self, indices=None, agent_ids=None, *, env_steps: bool = True,
                    neg_index_as_lookback: bool = False, fill: Any = None,
                    return_list: bool = False):
        return self._get("rewards", indices, agent_ids, env_steps, neg_index_as_lookback, fill,
                         False, return_list, None)

    def get_extra_model_outputs(self, key: str | None = None, indices=None, agent_ids=None, *,
                                env_steps: bool = True, neg_index_as_lookback: bool = False,
                                fill: Any = None, return_list: bool = False):
        return self._get("extra_model_outputs", indices, agent_ids, env_steps,
                         neg_index_as_lookback, fill, False, return_list, key)

    # ------------------------------------------------------------------ dispatch

    def _get(self, what, indices, agent_ids, env_steps, neg, fill, one_hot, return_list, key):
        if agent_ids is None or (isinstance(agent_ids, (list, tuple, set)) and not agent_ids):
            wanted = set(self.agent_episodes)
        elif isinstance(agent_ids, (list, tuple, set, frozenset)):
            wanted = set(agent_ids)
        else:
            wanted = {agent_ids}
        agents = [a for a in self.agent_episodes if a in wanted]
        if not env_steps:
            if return_list:
                raise ValueError(f"get_{what}() cannot take both env_steps=False and "
                                 "return_list=True")
            return self._by_agent_steps(what, indices, agents, neg, fill, one_hot, key)
        if return_list:
            return self._by_env_steps_list(what, indices, agents, neg, fill, one_hot, key)
        return self._by_env_steps(what, indices, agents, neg, fill, one_hot, key)

    def _values(self, what, agent_id, key, one_hot, idx, neg, fill, hanging):
        """One agent's value(s) at `idx` (agent steps, lookback excluded), hanging appended."""
        if what == "extra_model_outputs" and key is None:
            keys = list(self.agent_episodes[agent_id].extra_model_outputs)
            if not keys and hanging is not NO_VALUE:
                keys = list(hanging)
            return {k: _stack(self._buffer(agent_id, what, k).get(
                idx, neg=neg, fill=fill,
                add_last=NO_VALUE if hanging is NO_VALUE else hanging[k]))
                for k in keys}
        if what == "extra_model_outputs" and hanging is not NO_VALUE:
            hanging = hanging[key]
        if one_hot and hanging is not NO_VALUE:
            hanging = _one_hot(hanging, self._discrete_n(agent_id))
        return self._buffer(agent_id, what, key, one_hot).get(idx, neg=neg, fill=fill,
                                                              add_last=hanging)

    def _by_agent_steps(self, what, indices, agents, neg, fill, one_hot, key):
        out = {}
        for a in agents:
            hanging = self._hanging(what, a)
            value = self._values(what, a, key, one_hot, indices, neg, fill, hanging)
            # RLlib keeps an agent's empty result when a hanging value was appended (its
            # buffer turns into an array then), and drops it otherwise.
            if value is None or (isinstance(value, list) and not value and (
                    hanging is NO_VALUE or indices is None)):
                continue
            out[a] = _stack(value)
        return out

    def _agent_positions(self, what, agent_id, steps):
        """Env-map entries -> agent positions incl. lookback; the step after the last stored
        value (nothing there yet) becomes a skip for actions, rewards and model outputs."""
        ep = self.agent_episodes[agent_id]
        lookback = ep.len_lookback_buffer
        n_incl = _n_items(ep, what) + int(self._hanging(what, agent_id) is not NO_VALUE)
        ignore_last = what not in _LAST_IS_VALUE
        if what == "extra_model_outputs" and not ep.extra_model_outputs:
            ignore_last, n_incl = False, None
        start = self.agent_t_started[agent_id]

        def position(s):
            # RLlib compares the agent step itself with the buffer length, which is the
            # position only in chunks that start at agent step 0 with no lookback: in other
            # chunks it skips or keeps the wrong steps. We compare the position.
            if s == SKIP:
                return SKIP
            p = s - start + lookback
            return SKIP if (ignore_last and p == n_incl) else p

        if isinstance(steps, list):
            return [position(s) for s in steps]
        return position(steps)

    def _by_env_steps(self, what, indices, agents, neg, fill, one_hot, key):
        ignore_last = what not in _LAST_IS_VALUE
        out = {}
        for a in agents:
            hanging = self._hanging(what, a)
            steps = self._map(a, indices, neg=neg, fill=SKIP if fill is not None else None,
                              ignore_last=ignore_last)
            pos = self._agent_positions(what, a, steps)
            if isinstance(pos, list):
                value = self._at_positions(what, a, key, one_hot, pos, fill, hanging)
                if len(value) > 0:
                    out[a] = _stack(value) if isinstance(value, list) else value
            else:
                value = self._at_position(what, a, key, one_hot, pos, fill, hanging)
                if value is not None:
                    out[a] = value
        return out

    def _lookback_of(self, agent_id) -> int:
        return self.agent_episodes[agent_id].len_lookback_buffer

    def _at_position(self, what, agent_id, key, one_hot, pos, fill, hanging):
        if pos == SKIP:
            if fill is None:
                return None
            if what == "extra_model_outputs" and key is None:
                return {k: fill for k in self.agent_episodes[agent_id].extra_model_outputs}
            return self._fill_maker(agent_id, what, one_hot)(fill)
        return self._values(what, agent_id, key, one_hot, pos - self._lookback_of(agent_id),
                            True, fill, hanging)

    def _at_positions(self, what, agent_id, key, one_hot, positions, fill, hanging):
        if SKIP in positions and fill is not None:
            return [self._at_position(what, agent_id, key, one_hot, p, fill, hanging)
                    for p in positions]
        lb = self._lookback_of(agent_id)
        idx = [p - lb for p in positions if p != SKIP]
        if not idx:
            return []
        return self._values(what, agent_id, key, one_hot, idx, True, fill, hanging)

    def _by_env_steps_list(self, what, indices, agents, neg, fill, one_hot, key):
        ignore_last = what not in _LAST_IS_VALUE
        positions = {}
        for a in agents:
            steps = self._map(a, indices, neg=neg, fill=SKIP, ignore_last=ignore_last)
            if not isinstance(steps, list):
                raise TypeError(f"get_{what}(return_list=True) needs a list or slice index, "
                                f"got {indices!r}")
            positions[a] = self._agent_positions(what, a, steps)
        if not positions:
            return []
        n = len(next(iter(positions.values())))
        out = []
        for i in range(n):
            row = {}
            for a, pos in positions.items():
                if what == "extra_model_outputs" and not self.agent_episodes[a] \
                        .extra_model_outputs and self._hanging(what, a) is NO_VALUE:
                    continue
                value = self._at_position(what, a, key, one_hot, pos[i], fill,
                                          self._hanging(what, a))
                if value is not None:
                    row[a] = value
            out.append(row)
        return out


def _items(data: Any) -> list:
    leaves = jax.tree_util.tree_leaves(data)
    n = leaves[0].shape[0] if leaves else 0
    if isinstance(data, np.ndarray):
        return list(data)
    return [jax.tree_util.tree_map(lambda x, i=i: np.asarray(x)[i], data) for i in range(n)]


def _n_items(ep, what: str) -> int:
    if what == "observations":
        return ep._n_obs
    if what == "infos":
        return len(ep.infos)
    if what == "extra_model_outputs":
        k = next(iter(ep.extra_model_outputs), None)
        return 0 if k is None else len(ep.extra_model_outputs[k])
    return jax.tree_util.tree_leaves(getattr(ep, what))[0].shape[0]
