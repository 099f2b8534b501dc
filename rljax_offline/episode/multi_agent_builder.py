"""`MultiAgentEpisodeBuilder`: a multi-agent episode filled env step by env step.

`add_env_step` follows RLlib 2.60's four cases per agent: an observation and an action (a
complete step; the agent must get a reward); an observation without an action (the agent's
hanging action completes, or a late joiner's first observation); an action without an
observation (the action hangs until an observation comes); neither (a reward is added to the
hanging reward; at the end of the episode a hanging action completes with the agent's last
observation). Where RLlib is wrong we differ (see docs/guides/multi-agent-data.md): an episode
whose agents are all done is truncated, not terminated, unless every agent terminated, and an
agent is not marked terminated because the episode was truncated. Errors are named:
`AgentTruncatedWithoutObservationError`, `AgentNotInEnvError`,
`ObservationOutsideSpaceError`, `MultiAgentEpisodeError`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import jax
import numpy as np

from rljax_offline.episode.episode import Episode
from rljax_offline.episode.multi_agent import SKIP, MultiAgentEpisode
from rljax_offline.errors import (
    AgentNotInEnvError,
    AgentTruncatedWithoutObservationError,
    MultiAgentEpisodeError,
    ObservationOutsideSpaceError,
)


class _Agent:
    __slots__ = ("obs", "infos", "act", "rew", "emo", "terminated", "truncated", "id_",
                 "t_started", "lookback")

    def __init__(self, id_=None, t_started=0, lookback=0):
        self.obs, self.infos, self.act, self.rew = [], [], [], []
        self.emo: dict = {}
        self.terminated = self.truncated = False
        self.id_ = id_ or uuid.uuid4().hex
        self.t_started, self.lookback = t_started, lookback

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    def __len__(self) -> int:
        return len(self.act) - self.lookback

    def step(self, obs, act, rew, info, emo, terminated, truncated):
        self.obs.append(obs)
        self.infos.append({} if info is None else info)
        self.act.append(act)
        self.rew.append(rew)
        for k, v in (emo or {}).items():
            self.emo.setdefault(k, []).append(v)
        self.terminated, self.truncated = bool(terminated), bool(truncated)


class MultiAgentEpisodeBuilder:
    """Collects one multi-agent episode (chunk); `finalize()` gives the immutable episode.

    Args:
      id_: the episode id (a new uuid by default).
      observation_space: dict agent id -> gymnasium space (optional; with it, observations
        are checked, and `fill=` / `one_hot_discrete` know item shapes).
      action_space: dict agent id -> gymnasium space (optional; item shapes of actions).
      agent_to_module_mapping_fn: `(agent_id, episode) -> module_id`, or a dict; default:
        every agent to RLlib's `"default_policy"`.
      check_spaces: check each observation against its agent's space (an
        `ObservationOutsideSpaceError` names the agent and env step); False skips the check
        for data already known to be valid.
    """

    def __init__(self, id_: str | None = None, *, observation_space: dict | None = None,
                 action_space: dict | None = None,
                 agent_to_module_mapping_fn: Callable | dict | None = None,
                 check_spaces: bool = True):
        self.id_ = id_ or uuid.uuid4().hex
        self.observation_space = dict(observation_space or {})
        self.action_space = dict(action_space or {})
        self._map_fn = agent_to_module_mapping_fn
        self.check_spaces = check_spaces
        self.module_ids: dict = {}
        self.agents: dict[Any, _Agent] = {}
        self.env_map: dict[Any, list] = {}
        self.map_lookback: dict = {}
        self.agent_t_started: dict = {}
        self.env_t_started = self.env_t = 0
        self.len_lookback = 0
        self.is_terminated = self.is_truncated = False
        self.h_act: dict = {}
        self.h_emo: dict = {}
        self.h_rew_end: dict = {}
        self.h_rew_begin: dict = {}
        self.custom_data: dict = {}
        self._box_cache: dict = {}

    def module_for(self, agent_id) -> Any:
        if agent_id not in self.module_ids:
            fn = self._map_fn
            if fn is None:
                mid = "default_policy"
            elif isinstance(fn, dict):
                mid = fn[agent_id]
            else:
                mid = fn(agent_id, self)
            self.module_ids[agent_id] = mid
        return self.module_ids[agent_id]

    @property
    def is_done(self) -> bool:
        return self.is_terminated or self.is_truncated

    def _check_obs(self, agent_id, obs) -> Any:
        """The observation (a list for a Box space becomes its array), checked against the
        agent's space when one is known (a Box by shape, dtype kind and bounds, which is
        several times cheaper than `space.contains`; other spaces by `contains`)."""
        space = self.observation_space.get(agent_id)
        if space is None:
            return obs
        if isinstance(space, gym.spaces.Box):
            if isinstance(obs, (list, tuple)):
                obs = np.asarray(obs, space.dtype)
            if self.check_spaces and not _in_box(obs, space, self._box_cache):
                raise ObservationOutsideSpaceError(agent_id, self.env_t, space, obs)
            return obs
        if self.check_spaces:
            try:
                ok = bool(space.contains(obs))
            except Exception:  # noqa: BLE001 (a malformed value is outside the space too)
                ok = False
            if not ok:
                raise ObservationOutsideSpaceError(agent_id, self.env_t, space, obs)
        return obs

    def add_env_reset(self, *, observations: dict, infos: dict | None = None) -> None:
        if self.is_done or self.env_t != 0 or self.agents:
            raise MultiAgentEpisodeError(f"episode {self.id_!r} was already reset or stepped")
        infos = infos or {}
        for a, obs in observations.items():
            obs = self._check_obs(a, obs)
            self.env_map[a] = [0]
            self.map_lookback[a] = 0
            self.agent_t_started[a] = 0
            ag = self.agents[a] = _Agent()
            ag.obs.append(obs)
            ag.infos.append(infos.get(a) or {})
            self.module_for(a)

    def add_env_step(self, observations: dict, actions: dict, rewards: dict,
                     infos: dict | None = None, *, terminateds: dict | None = None,
                     truncateds: dict | None = None,
                     extra_model_outputs: dict | None = None) -> None:
        """One env step: dicts agent id -> value (`terminateds`/`truncateds` may hold
        `"__all__"`). See the module docstring for the four cases per agent."""
        if self.is_done:
            raise MultiAgentEpisodeError(f"episode {self.id_!r} is done; cannot add a step")
        infos, terminateds = infos or {}, terminateds or {}
        truncateds, emos = truncateds or {}, extra_model_outputs or {}
        for a in actions:
            if a not in self.agents:
                raise AgentNotInEnvError(a, self.env_t + 1)
        observations = {a: self._check_obs(a, obs) for a, obs in observations.items()}
        self.env_t += 1
        self.is_terminated = bool(terminateds.get("__all__", False))
        self.is_truncated = bool(truncateds.get("__all__", False))
        done = {a for a, ag in self.agents.items() if ag.done}
        done |= {a for a, v in terminateds.items() if v and a != "__all__"}
        done |= {a for a, v in truncateds.items() if v and a != "__all__"}
        if self.agents and all(a in done for a in self.agents) and not self.is_done:
            # RLlib sets is_terminated here even when agents were truncated (a bug).
            all_term = all(self.agents[a].terminated or terminateds.get(a)
                           for a in self.agents)
            self.is_terminated, self.is_truncated = all_term, not all_term
        for a, m in self.env_map.items():
            if a not in observations:
                m.append(SKIP)
        with_data = set(observations) | set(actions) | set(rewards) | set(terminateds) | \
            set(truncateds)
        if terminateds.get("__all__") or truncateds.get("__all__"):
            with_data |= set(self.agents)
        with_data.discard("__all__")
        for a in sorted(with_data, key=str):
            self._step_agent(a, observations, actions, rewards, infos, terminateds,
                             truncateds, emos)

    def _step_agent(self, a, observations, actions, rewards, infos, terminateds,
                    truncateds, emos) -> None:
        ag = self.agents.get(a)
        obs, act, rew = observations.get(a), actions.get(a), rewards.get(a)
        info, emo = infos.get(a), emos.get(a)
        term = bool(terminateds.get(a, False)) or self.is_terminated
        trunc = bool(truncateds.get(a, False)) or self.is_truncated
        if ag is not None and ag.done and any(v is not None for v in (obs, act, rew, info,
                                                                       emo)):
            raise MultiAgentEpisodeError(f"env step {self.env_t}: agent {a!r} is already done "
                                         "but received data")
        rew = 0.0 if rew is None else rew
        if obs is not None and act is not None:
            if a not in rewards:
                raise MultiAgentEpisodeError(f"env step {self.env_t}: agent {a!r} acted and "
                                             "got its next observation, but no reward")
        elif obs is not None:
            act = self.h_act.pop(a, None)
            if act is not None:
                emo = self.h_emo.pop(a, None)
                rew = self.h_rew_end.pop(a, 0.0) + rew
            elif term or trunc:
                self._drop_hanging(a)
                return
            else:  # a late joiner's first observation
                # one entry per env step of this chunk and its lookback (RLlib puts one per
                # env step since the episode's start, too many for a chunk after a cut)
                self.env_map[a] = [SKIP] * (self.env_t - self.env_t_started +
                                            self.len_lookback) + [0]
                self.map_lookback[a] = self.len_lookback
                self.agent_t_started.setdefault(a, 0)
                ag = self.agents[a] = _Agent()
                ag.obs.append(obs)
                ag.infos.append(info or {})
                self.module_for(a)
                self.h_rew_begin[a] = self.h_rew_begin.get(a, 0.0) + rew
                return
        elif act is not None:
            if trunc:
                raise AgentTruncatedWithoutObservationError(a, self.env_t)
            if term:
                obs, info = ag.obs[-1], ag.infos[-1]
            else:
                self.h_act[a], self.h_rew_end[a], self.h_emo[a] = act, rew, emo
        else:
            act = self.h_act.get(a)
            if term or trunc:
                if act is None:
                    self._drop_hanging(a)
                    return
                if trunc:
                    raise AgentTruncatedWithoutObservationError(a, self.env_t)
                obs, info = ag.obs[-1], ag.infos[-1]
                emo = self.h_emo.pop(a, None)
                rew = self.h_rew_end.pop(a, 0.0) + rew
            elif ag is None:
                self.h_rew_begin[a] = self.h_rew_begin.get(a, 0.0) + rew
            else:
                self.h_rew_end[a] = self.h_rew_end.get(a, 0.0) + rew
        if obs is not None:
            ag.step(obs, act, rew, info, emo, term, trunc)
            entry = len(ag) + self.agent_t_started.get(a, 0)
            if a not in observations:
                # terminated with its action hanging and no observation: the terminal step
                # is at this env step, in place of the skip tag (RLlib appends both, which
                # shifts every later env step of this agent by one)
                self.env_map[a][-1] = entry
            else:
                self.env_map[a].append(entry)
        if term or trunc:
            self._drop_hanging(a)

    def _drop_hanging(self, a) -> None:
        for d in (self.h_rew_begin, self.h_act, self.h_emo, self.h_rew_end):
            d.pop(a, None)

    # ------------------------------------------------------------------ finalize

    def finalize(self) -> MultiAgentEpisode:
        """The immutable episode of what was collected so far."""
        episodes = {}
        for a, ag in self.agents.items():
            short = {k: len(v) for k, v in ag.emo.items() if len(v) != len(ag.act)}
            if short:
                raise MultiAgentEpisodeError(
                    f"agent {a!r}: extra_model_outputs {short} do not cover its "
                    f"{len(ag.act)} actions: pass the same model-output keys with every "
                    "action of an agent")
            episodes[a] = Episode(
                observations=list(ag.obs), actions=list(ag.act), rewards=list(ag.rew),
                infos=list(ag.infos), extra_model_outputs={k: list(v) for k, v in
                                                           ag.emo.items()},
                terminated=ag.terminated, truncated=ag.truncated, id_=ag.id_, agent_id=a,
                module_id=self.module_for(a), multi_agent_episode_id=self.id_,
                t_started=self.agent_t_started.get(a, 0), len_lookback_buffer=ag.lookback,
                observation_space=self.observation_space.get(a),
                action_space=self.action_space.get(a))
        return MultiAgentEpisode(
            id_=self.id_, agent_episodes=episodes, env_t_to_agent_t=self.env_map,
            map_lookback=self.map_lookback, agent_t_started=self.agent_t_started,
            env_t_started=self.env_t_started, env_t=self.env_t,
            is_terminated=self.is_terminated, is_truncated=self.is_truncated,
            hanging_actions_end=self.h_act, hanging_extra_model_outputs_end=self.h_emo,
            hanging_rewards_end=self.h_rew_end, hanging_rewards_begin=self.h_rew_begin,
            agent_module_ids=self.module_ids, observation_space=self.observation_space,
            action_space=self.action_space, custom_data=self.custom_data)

    @classmethod
    def from_episode(cls, ep: MultiAgentEpisode, *,
                     agent_to_module_mapping_fn: Callable | dict | None = None
                     ) -> MultiAgentEpisodeBuilder:
        """A builder that continues `ep` (e.g. the chunk `cut()` returned); agents that join
        later are mapped by `agent_to_module_mapping_fn` (the episode keeps only the ids)."""
        b = cls(ep.id_, observation_space=dict(ep.observation_space),
                action_space=dict(ep.action_space),
                agent_to_module_mapping_fn=agent_to_module_mapping_fn)
        b.module_ids = dict(ep.agent_module_ids)
        for a, e in ep.agent_episodes.items():
            ag = b.agents[a] = _Agent(e.id_, e.t_started, e.len_lookback_buffer)
            n_obs = e._n_obs
            ag.obs = [_item(e.observations, i) for i in range(n_obs)]
            ag.infos = list(e.infos)
            ag.act = [_item(e.actions, i) for i in range(n_obs - 1)]
            ag.rew = [float(r) for r in e.rewards]
            ag.emo = {k: [_item(v, i) for i in range(n_obs - 1)]
                      for k, v in e.extra_model_outputs.items()}
            ag.terminated, ag.truncated = e.terminated, e.truncated
        b.env_map = {a: list(v) for a, v in ep.env_t_to_agent_t.items()}
        b.map_lookback = dict(ep.map_lookback)
        b.agent_t_started = dict(ep.agent_t_started)
        b.env_t_started, b.env_t = ep.env_t_started, ep.env_t
        b.len_lookback = max(list(ep.map_lookback.values()) or [0])
        b.is_terminated, b.is_truncated = ep.is_terminated, ep.is_truncated
        b.h_act = dict(ep.hanging_actions_end)
        b.h_emo = dict(ep.hanging_extra_model_outputs_end)
        b.h_rew_end = dict(ep.hanging_rewards_end)
        b.h_rew_begin = dict(ep.hanging_rewards_begin)
        b.custom_data = dict(ep.custom_data)
        return b


def _in_box(obs: Any, space: gym.spaces.Box, cache: dict) -> bool:
    """`space.contains(obs)` for a Box: shape, a dtype that casts, finite bounds held."""
    key = id(space)
    info = cache.get(key)
    if info is None:
        low = np.broadcast_to(space.low, space.shape)
        high = np.broadcast_to(space.high, space.shape)
        bounded = bool(np.isfinite(low).any() or np.isfinite(high).any())
        info = cache[key] = (space.shape, space.dtype, bounded, low, high)
    shape, dtype, bounded, low, high = info
    if not isinstance(obs, np.ndarray):
        try:
            obs = np.asarray(obs, dtype)
        except (TypeError, ValueError):
            return False
    if obs.shape != shape or not np.can_cast(obs.dtype, dtype):
        return False
    if not bounded:  # as gymnasium: NaN is outside even (-inf, inf)
        return obs.dtype.kind != "f" or not bool(np.isnan(obs).any())
    return bool(np.all(obs >= low) and np.all(obs <= high))


def _item(data, i):
    return jax.tree_util.tree_map(lambda x: np.asarray(x)[i], data)
