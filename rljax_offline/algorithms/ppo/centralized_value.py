"""MAPPO's global state (`PPOConfig.training(centralized_value=True)`): what each module's
value network reads in place of the agent's observation, attached to every agent's sampled
episode as two extra columns.

The global state at an env step is the one MATD3+BC's centralised critic reads
(`connectors.joint_rows`): the env's `state()` as `MultiAgentEnvRunner` records it per env
step (PettingZoo's MPE: every agent's observation concatenated in `possible_agents`
order), or, for an env without `state()`, the agents' observations flattened and
concatenated in sorted agent order. Each agent's episode gets `global_state` (the state
before each of its steps) and `new_global_state` (after it) as extra model outputs, so
PPO's learner pipeline makes them columns and GAE reads `V(global_state)` per agent, on the
agent's own rewards. Only agents that act at every env step have one global state per step:
others are an `AsynchronousAgentsError` (`joint_rows.check_synchronized`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.acting.multi_agent_runner import agent_spaces, as_parallel
from rljax_offline.algorithms.multi_agent import global_state_shape
from rljax_offline.connectors.joint_rows import check_synchronized, episode_global_states
from rljax_offline.episode.multi_agent import MultiAgentEpisode

__all__ = ["GlobalState"]

NEXT = "new_global_state"


class GlobalState:
    """The global state of one env (see the module docstring).

    Args:
      agent_ids: the agents, in the order of the concatenation.
      env_state: whether the env has `state()` (else the observations concatenated).
      dim: the global state's size.
    """

    def __init__(self, agent_ids: list, env_state: bool, dim: int):
        self.agent_ids, self.env_state, self.dim = list(agent_ids), env_state, int(dim)
        self.spec = sp.BoxSpec(shape=(self.dim,), dtype="float32",
                               low=(-float("inf"),) * self.dim,
                               high=(float("inf"),) * self.dim)

    @classmethod
    def of(cls, env_fn: Callable[[], Any], seed: int) -> GlobalState:
        """The global state of the env `env_fn` makes (one env, reset once and closed).

        Args:
          env_fn: `() -> env`.
          seed: the probe's reset seed.
        """
        env = as_parallel(env_fn())
        try:
            agents, obs_spaces, _ = agent_spaces(env)
            shape = global_state_shape(env, seed)
        finally:
            getattr(env, "close", lambda: None)()
        agents = sorted(agents, key=str)
        if shape is not None:
            return cls(agents, True, int(np.prod(shape)))
        return cls(agents, False, sum(sp.flat_dim(sp.to_spec(obs_spaces[a])) for a in agents))

    def states(self, episode: MultiAgentEpisode) -> np.ndarray:
        """`[env steps + 1, dim]`: the global state before each env step of `episode` and
        after its last.

        Args:
          episode: a sampled multi-agent episode whose agents act at every env step.
        """
        check_synchronized(episode, self.agent_ids)
        if self.env_state:
            states = episode_global_states(episode)
        else:
            n = len(episode)
            states = np.concatenate(
                [np.asarray(episode.agent_episodes[a].get_observations(slice(0, n + 1)))
                 .reshape(n + 1, -1) for a in self.agent_ids], axis=1)
        return np.asarray(states, np.float32).reshape(len(states), -1)

    def attach(self, episode: MultiAgentEpisode) -> dict:
        """`{agent_id: its episode with the extra columns global_state and
        new_global_state}` (lookback steps, if any, get zeros).

        Args:
          episode: a sampled multi-agent episode whose agents act at every env step.
        """
        states = self.states(episode)
        out = {}
        for agent_id, ep in episode.agent_episodes.items():
            pad = np.zeros((ep.len_lookback_buffer, self.dim), np.float32)
            extra = {**ep.extra_model_outputs,
                     "global_state": np.concatenate([pad, states[:-1]]),
                     NEXT: np.concatenate([pad, states[1:]])}
            out[agent_id] = ep.replace(extra_model_outputs=extra)
        return out
