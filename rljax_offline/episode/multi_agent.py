"""`MultiAgentEpisode`: RLlib 2.60's multi-agent episode, immutable.

One `Episode` per agent (each with its `agent_id`, `module_id` and `multi_agent_episode_id`),
the env-step map `env_t_to_agent_t` (per agent, one entry per env step: the agent's step, or
the skip tag `"S"` where it did not step; its first `map_lookback[agent]` entries are lookback)
and the hanging values of agents that acted and have no observation back yet (action, model
outputs, reward), plus rewards that arrived before an agent's first observation
(`hanging_rewards_begin`). The getters are RLlib's (`multi_agent_access`); the episode is
built step by step with `MultiAgentEpisodeBuilder` (`multi_agent_builder`). What mutates in
RLlib (`concat_episode`) returns a new episode here.

Example:
    >>> from rljax_offline.episode.multi_agent_builder import MultiAgentEpisodeBuilder
    >>> b = MultiAgentEpisodeBuilder()
    >>> b.add_env_reset(observations={"a": 0.0, "b": 0.0})
    >>> b.add_env_step({"a": 1.0}, {"a": 0, "b": 1}, {"a": 1.0, "b": 0.5})
    >>> ep = b.finalize()
    >>> ep.env_t_to_agent_t["b"], ep.get_return(), ep.get_return(include_hanging_rewards=True)
    ((0, 'S'), 1.0, 1.5)
"""

from __future__ import annotations

import types
from typing import Any

import jax

from rljax_offline.episode.episode import Episode
from rljax_offline.episode.multi_agent_access import SKIP, MultiAgentAccess
from rljax_offline.errors import MultiAgentEpisodeError

__all__ = ["MultiAgentEpisode", "SKIP"]


class MultiAgentEpisode(MultiAgentAccess):
    """A finalized multi-agent episode (chunk). See the module docstring.

    Usually made by `MultiAgentEpisodeBuilder.finalize()`, `MultiAgentEpisode.from_state` or
    the multi-agent readers; the constructor checks that every agent has an `Episode` and an
    env-step map of the right length. Agent-keyed fields are dicts agent id -> value.

    Args:
      id_: the multi-agent episode id (each agent episode's `multi_agent_episode_id`).
      agent_episodes: agent id -> that agent's `Episode`.
      env_t_to_agent_t: agent id -> per env step (lookback first) the agent's step index, or
        the skip tag `"S"` where the agent did not step.
      map_lookback: agent id -> how many leading entries of its env-step map are lookback.
      agent_t_started: agent id -> the agent's global step at the start of this chunk.
      env_t_started: the env step this chunk starts at.
      env_t: the env step this chunk ends at.
      is_terminated: the episode ended because every agent terminated.
      is_truncated: the episode was cut short (a time limit, or all agents done without all
        of them terminated).
      hanging_actions_end: agent id -> an action still waiting for its next observation.
      hanging_extra_model_outputs_end: agent id -> the model outputs of that action.
      hanging_rewards_end: agent id -> reward received since the agent's last observation.
      hanging_rewards_begin: agent id -> reward received before the agent's first
        observation of this chunk.
      agent_module_ids: agent id -> the module that acts for it.
      observation_space: agent id -> its observation space.
      action_space: agent id -> its action space.
      custom_data: free-form host data (RLlib's `custom_data`).

    Raises:
      MultiAgentEpisodeError: an agent without an `Episode` or env-step map, or a map whose
        length does not match the chunk's env steps and lookback.
    """

    SKIP_ENV_TS_TAG = SKIP
    __slots__ = ("id_", "agent_episodes", "env_t_to_agent_t", "map_lookback",
                 "agent_t_started", "env_t_started", "env_t", "is_terminated", "is_truncated",
                 "hanging_actions_end", "hanging_extra_model_outputs_end",
                 "hanging_rewards_end", "hanging_rewards_begin", "agent_module_ids",
                 "observation_space", "action_space", "custom_data", "_cache")

    def __init__(self, *, id_: str, agent_episodes: dict, env_t_to_agent_t: dict,
                 map_lookback: dict, agent_t_started: dict, env_t_started: int, env_t: int,
                 is_terminated: bool = False, is_truncated: bool = False,
                 hanging_actions_end: dict | None = None,
                 hanging_extra_model_outputs_end: dict | None = None,
                 hanging_rewards_end: dict | None = None,
                 hanging_rewards_begin: dict | None = None,
                 agent_module_ids: dict | None = None, observation_space: dict | None = None,
                 action_space: dict | None = None, custom_data: dict | None = None):
        for a, ep in agent_episodes.items():
            if not isinstance(ep, Episode):
                raise MultiAgentEpisodeError(f"agent {a!r}: expected an Episode, got "
                                             f"{type(ep).__name__}")
            if a not in env_t_to_agent_t:
                raise MultiAgentEpisodeError(f"agent {a!r} has no env-step map")
            want = int(map_lookback[a]) + int(env_t) - int(env_t_started) + 1
            if len(env_t_to_agent_t[a]) != want:
                raise MultiAgentEpisodeError(
                    f"agent {a!r}: its env-step map has {len(env_t_to_agent_t[a])} entries, "
                    f"expected {want} (lookback {map_lookback[a]} + "
                    f"{int(env_t) - int(env_t_started)} env steps + 1)")
        values = dict(
            id_=id_, agent_episodes=types.MappingProxyType(dict(agent_episodes)),
            env_t_to_agent_t=types.MappingProxyType(
                {a: tuple(v) for a, v in env_t_to_agent_t.items()}),
            map_lookback=types.MappingProxyType(dict(map_lookback)),
            agent_t_started=types.MappingProxyType(dict(agent_t_started)),
            env_t_started=int(env_t_started), env_t=int(env_t),
            is_terminated=bool(is_terminated), is_truncated=bool(is_truncated),
            hanging_actions_end=types.MappingProxyType(dict(hanging_actions_end or {})),
            hanging_extra_model_outputs_end=types.MappingProxyType(
                dict(hanging_extra_model_outputs_end or {})),
            hanging_rewards_end=types.MappingProxyType(dict(hanging_rewards_end or {})),
            hanging_rewards_begin=types.MappingProxyType(dict(hanging_rewards_begin or {})),
            agent_module_ids=types.MappingProxyType(dict(agent_module_ids or {})),
            observation_space=types.MappingProxyType(dict(observation_space or {})),
            action_space=types.MappingProxyType(dict(action_space or {})),
            custom_data=types.MappingProxyType(dict(custom_data or {})), _cache={})
        for k, v in values.items():
            object.__setattr__(self, k, v)

    def __setattr__(self, name, value):
        raise AttributeError(f"MultiAgentEpisode is immutable (cannot set {name!r}); use "
                             "replace(...)")

    def _fields(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__ if k != "_cache"}

    def replace(self, **changes) -> MultiAgentEpisode:
        """A new episode with the given fields changed (a new `id_` goes to the agent
        episodes' `multi_agent_episode_id` too)."""
        fields = self._fields()
        unknown = set(changes) - set(fields)
        if unknown:
            raise TypeError(f"replace() got unknown fields {sorted(unknown)}")
        fields.update(changes)
        if "id_" in changes and "agent_episodes" not in changes:
            fields["agent_episodes"] = {a: e.replace(multi_agent_episode_id=changes["id_"])
                                        for a, e in self.agent_episodes.items()}
        return MultiAgentEpisode(**{k: dict(v) if isinstance(v, types.MappingProxyType)
                                    else v for k, v in fields.items()})

    def __repr__(self) -> str:
        return (f"MultiAgentEpisode(id_={self.id_!r}, len={len(self)}, agents="
                f"{sorted(map(str, self.agent_episodes))}, done={self.is_done})")

    # ------------------------------------------------------------------ properties

    def __len__(self) -> int:
        return self.env_t - self.env_t_started

    def env_steps(self) -> int:
        return len(self)

    def agent_steps(self) -> int:
        return sum(len(ep) for ep in self.agent_episodes.values())

    @property
    def agent_ids(self) -> set:
        return set(self.agent_episodes)

    @property
    def agent_episode_ids(self) -> dict:
        return {a: ep.id_ for a, ep in self.agent_episodes.items()}

    @property
    def is_done(self) -> bool:
        return self.is_terminated or self.is_truncated

    @property
    def is_reset(self) -> bool:
        return any(ep._n_obs > 0 for ep in self.agent_episodes.values())

    def module_for(self, agent_id) -> Any:
        return self.agent_module_ids.get(agent_id)

    def get_terminateds(self) -> dict:
        out = {a: ep.is_terminated for a, ep in self.agent_episodes.items()}
        out["__all__"] = self.is_terminated
        return out

    def get_truncateds(self) -> dict:
        """Per-agent truncation flags and `"__all__"`: the episode's truncation (RLlib 2.60
        puts `is_terminated` there, a bug)."""
        out = {a: ep.is_truncated for a, ep in self.agent_episodes.items()}
        out["__all__"] = self.is_truncated
        return out

    def get_return(self, include_hanging_rewards: bool = False) -> float:
        total = sum(float(ep.get_return()) for ep in self.agent_episodes.values())
        if include_hanging_rewards:
            total += sum(float(r) for r in self.hanging_rewards_begin.values())
            total += sum(float(r) for r in self.hanging_rewards_end.values())
        return total

    def get_agents_that_stepped(self) -> set:
        return set(self.get_observations(-1))

    def get_agents_to_act(self) -> set:
        return {a for a in self.get_observations(-1) if not self.agent_episodes[a].is_done}

    def get_sample_batch(self) -> dict:
        """RLlib's `MultiAgentBatch` as `{agent_id: {column: array}}` plus `env_steps`
        (RLlib keys policy batches by agent id here, too)."""
        from rljax_offline.episode.multi_agent_batch import agent_sample_batch
        return {"policy_batches": {a: agent_sample_batch(ep)
                                   for a, ep in self.agent_episodes.items() if len(ep) > 0},
                "env_steps": len(self)}

    # ------------------------------------------------------------------ setters (new episodes)

    def _set(self, what: str, new_data: dict, **kw) -> MultiAgentEpisode:
        episodes = dict(self.agent_episodes)
        for agent_id, data in new_data.items():
            if agent_id not in episodes:
                raise KeyError(f"agent {agent_id!r} is not in this episode (agents: "
                               f"{sorted(map(str, episodes))})")
            episodes[agent_id] = getattr(episodes[agent_id], f"set_{what}")(
                new_data=data, **kw)
        return self.replace(agent_episodes=episodes)

    def set_observations(self, *, new_data: dict, at_indices=None,
                         neg_index_as_lookback: bool = False) -> MultiAgentEpisode:
        """RLlib's `set_observations` per agent (agent steps), as a new episode."""
        return self._set("observations", new_data, at_indices=at_indices,
                         neg_index_as_lookback=neg_index_as_lookback)

    def set_actions(self, *, new_data: dict, at_indices=None,
                    neg_index_as_lookback: bool = False) -> MultiAgentEpisode:
        return self._set("actions", new_data, at_indices=at_indices,
                         neg_index_as_lookback=neg_index_as_lookback)

    def set_rewards(self, *, new_data: dict, at_indices=None,
                    neg_index_as_lookback: bool = False) -> MultiAgentEpisode:
        return self._set("rewards", new_data, at_indices=at_indices,
                         neg_index_as_lookback=neg_index_as_lookback)

    def set_extra_model_outputs(self, *, key: str, new_data: dict, at_indices=None,
                                neg_index_as_lookback: bool = False) -> MultiAgentEpisode:
        return self._set("extra_model_outputs", new_data, key=key, at_indices=at_indices,
                         neg_index_as_lookback=neg_index_as_lookback)

    def to_numpy(self) -> MultiAgentEpisode:
        return self.replace(agent_episodes={a: ep.to_numpy()
                                            for a, ep in self.agent_episodes.items()})

    # ------------------------------------------------------------------ chunks

    def __getitem__(self, item):
        if isinstance(item, slice):
            return self.slice(item)
        raise NotImplementedError("MultiAgentEpisode[...] takes a slice (episode[a:b])")

    def slice(self, slice_: slice, *, len_lookback_buffer: int | None = None):
        from rljax_offline.episode.multi_agent_chunks import slice_episode
        return slice_episode(self, slice_, len_lookback_buffer)

    def cut(self, len_lookback_buffer: int = 0) -> MultiAgentEpisode:
        from rljax_offline.episode.multi_agent_chunks import cut_episode
        return cut_episode(self, len_lookback_buffer)

    def concat_episode(self, other: MultiAgentEpisode) -> MultiAgentEpisode:
        from rljax_offline.episode.multi_agent_chunks import concat_episodes
        return concat_episodes(self, other)


# ---------------------------------------------------------------------- pytree

_LEAF_FIELDS = ("agent_episodes", "hanging_actions_end", "hanging_extra_model_outputs_end",
                "hanging_rewards_end", "hanging_rewards_begin")
_STATIC_FIELDS = tuple(f for f in MultiAgentEpisode.__slots__
                       if f not in _LEAF_FIELDS and f != "_cache")


class _Static:
    """The non-array fields of a flattened episode; equal (and hashed) by the env-step maps,
    flags and module ids, which is what shapes depend on (ids, spaces, custom data ride
    along, as `Episode`'s host data does)."""

    __slots__ = ("values", "key")

    def __init__(self, values: dict):
        self.values = values
        self.key = (
            tuple((repr(a), m) for a, m in values["env_t_to_agent_t"].items()),
            tuple((repr(a), v) for a, v in values["map_lookback"].items()),
            tuple((repr(a), v) for a, v in values["agent_t_started"].items()),
            values["env_t_started"], values["env_t"], values["is_terminated"],
            values["is_truncated"],
            tuple((repr(a), repr(v)) for a, v in values["agent_module_ids"].items()))

    def __eq__(self, other):
        return isinstance(other, _Static) and self.key == other.key

    def __hash__(self):
        return hash(self.key)


def _flatten(ep: MultiAgentEpisode):
    children = tuple(dict(getattr(ep, f)) for f in _LEAF_FIELDS)
    return children, _Static({f: getattr(ep, f) for f in _STATIC_FIELDS})


def _unflatten(static: _Static, children) -> MultiAgentEpisode:
    out = object.__new__(MultiAgentEpisode)
    for f, v in static.values.items():
        object.__setattr__(out, f, v)
    for f, v in zip(_LEAF_FIELDS, children):
        object.__setattr__(out, f, types.MappingProxyType(dict(v)))
    object.__setattr__(out, "_cache", {})
    return out


# A pytree: `jax.tree_util.tree_map(np.asarray, ep)` and `jax.device_put(ep)` keep it a
# MultiAgentEpisode (agent episodes come back without host data, as `Episode`s do). Its
# static part holds the env-step maps, so `jit` over episodes compiles per step pattern:
# jitted code takes `module_batches(episodes)` instead.
jax.tree_util.register_pytree_node(MultiAgentEpisode, _flatten, _unflatten)
