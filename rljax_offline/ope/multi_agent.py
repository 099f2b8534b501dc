"""Off-policy evaluation of a team: every agent's policy judged together by the team return.

A multi-agent episode whose agents all act at every env step becomes one single-agent *team
episode*: its observation is every agent's observation side by side (what a centralised Q
reads), its action the joint action (Discrete agents: one index of the joint action,
`a_0 * n_1 * n_2 + a_1 * n_2 + a_2`, so a Q network has one output per joint action;
Box agents: the actions side by side), its reward the team reward (the sum over agents), and
its behaviour `action_logp` the sum of the agents' (the behaviour policy of the team is the
product of the agents'). The team target is the product of the agents' targets, each reading
its own slice of the team observation. Then every estimator of `ope.estimate` applies as it
is: IS / WIS / PDIS / WPDIS weight by the product of per-agent ratios (per-module importance
sampling), FQE fits the centralised Q on the team observation and joint action, DR combines
them.

Agents that skip env steps (hanging actions) have no joint action at those steps: a named
error (`OPEError`) names the episode and the agent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from rljax_offline.episode.episode import Episode
from rljax_offline.episode.multi_agent import MultiAgentEpisode
from rljax_offline.errors import OPEError
from rljax_offline.ope.api import DEFAULT_METHODS, estimate
from rljax_offline.ope.data import LOGP

__all__ = ["TeamSpaces", "estimate_team", "team_episodes", "team_spaces", "team_target"]


class TeamSpaces:
    """The team's spaces and how they split into the agents'.

    Args:
      agents: the agents, in the order their parts sit side by side.
      observation_spaces: `{agent_id: flat Box}`.
      action_spaces: `{agent_id: Discrete or flat Box}` (all of one kind).
    """

    def __init__(self, agents: Sequence, observation_spaces: Mapping, action_spaces: Mapping):
        self.agents = tuple(agents)
        obs = [observation_spaces[a] for a in self.agents]
        acts = [action_spaces[a] for a in self.agents]
        if not all(isinstance(s, gym.spaces.Box) and len(s.shape) == 1 for s in obs):
            raise OPEError("team OPE needs flat Box observations for every agent, got "
                           f"{dict(zip(self.agents, obs))}")
        self.discrete = all(isinstance(s, gym.spaces.Discrete) for s in acts)
        if not self.discrete and not all(isinstance(s, gym.spaces.Box) and len(s.shape) == 1
                                         for s in acts):
            raise OPEError("team OPE needs every agent's actions Discrete, or every agent's "
                           f"a flat Box, got {dict(zip(self.agents, acts))}")
        self.obs_sizes = [int(s.shape[0]) for s in obs]
        self.obs_offsets = np.cumsum([0, *self.obs_sizes])
        self.observation_space = gym.spaces.Box(
            np.concatenate([np.broadcast_to(s.low, s.shape) for s in obs]).astype(np.float32),
            np.concatenate([np.broadcast_to(s.high, s.shape) for s in obs]).astype(np.float32))
        if self.discrete:
            self.action_sizes = [int(s.n) for s in acts]
            self.starts = [int(s.start) for s in acts]
            self.action_space = gym.spaces.Discrete(int(np.prod(self.action_sizes)))
        else:
            self.action_sizes = [int(s.shape[0]) for s in acts]
            self.action_space = gym.spaces.Box(
                np.concatenate([np.broadcast_to(s.low, s.shape) for s in acts]),
                np.concatenate([np.broadcast_to(s.high, s.shape) for s in acts]))
        self.act_offsets = np.cumsum([0, *self.action_sizes])

    def agent_obs(self, obs: np.ndarray, i: int) -> np.ndarray:
        """Agent `i`'s slice of team observations `[N, D]`."""
        return obs[:, self.obs_offsets[i]:self.obs_offsets[i + 1]]

    def joint_action(self, actions: Sequence[np.ndarray]) -> np.ndarray:
        """The agents' actions `[T]` (Discrete) or `[T, k_i]` as the team's."""
        if not self.discrete:
            return np.concatenate([np.asarray(a, np.float32) for a in actions], axis=1)
        index = np.zeros(len(actions[0]), np.int64)
        for a, n, start in zip(actions, self.action_sizes, self.starts):
            index = index * n + (np.asarray(a, np.int64) - start)
        return index


def team_spaces(episodes: Sequence[MultiAgentEpisode], agents: Sequence | None = None
                ) -> TeamSpaces:
    """The `TeamSpaces` of `episodes`, from the spaces their agent episodes carry.

    Args:
      episodes: multi-agent episodes (the first one's agents and spaces are read).
      agents: the agents' order (None: sorted).
    """
    first = episodes[0]
    agents = tuple(agents) if agents is not None else tuple(sorted(first.agent_episodes,
                                                                   key=str))
    obs, act = {}, {}
    for a in agents:
        if a not in first.agent_episodes:
            raise OPEError(f"episode {first.id_!r} has no agent {a!r}")
        ep = first.agent_episodes[a]
        obs[a], act[a] = ep.observation_space, ep.action_space
    return TeamSpaces(agents, obs, act)


def team_episodes(episodes: Sequence[MultiAgentEpisode], spaces: TeamSpaces) -> list[Episode]:
    """Each multi-agent episode as its team episode (see the module docstring).

    Args:
      episodes: multi-agent episodes whose agents all act at every env step.
      spaces: from `team_spaces`.

    Raises:
      OPEError: an agent that missed env steps or is absent.
    """
    out = []
    for ma in episodes:
        steps = ma.env_steps()
        parts = []
        for a in spaces.agents:
            ep = ma.agent_episodes.get(a)
            if ep is None or len(ep) != steps or ep.t_started != ma.env_t_started:
                got = "absent" if ep is None else f"{len(ep)} steps from env step " \
                                                   f"{ep.t_started}"
                raise OPEError(f"episode {ma.id_!r}, agent {a!r}: team OPE needs every agent "
                               f"at every env step ({steps} from {ma.env_t_started}), got "
                               f"{got}")
            parts.append(ep)
        obs = np.concatenate([np.asarray(ep.get_observations(slice(0, steps + 1)),
                                         np.float32) for ep in parts], axis=1)
        actions = spaces.joint_action([np.asarray(ep.get_actions()) for ep in parts])
        rewards = np.sum([np.asarray(ep.get_rewards(), np.float64) for ep in parts], axis=0)
        extra = {}
        if all(LOGP in ep.extra_model_outputs for ep in parts):
            extra[LOGP] = np.sum([np.asarray(ep.get_extra_model_outputs(LOGP), np.float64)
                                  for ep in parts], axis=0)
        out.append(Episode(observations=obs, actions=actions, rewards=rewards.astype(np.float32),
                           extra_model_outputs=extra, terminated=ma.is_terminated,
                           truncated=not ma.is_terminated, id_=str(ma.id_),
                           observation_space=spaces.observation_space,
                           action_space=spaces.action_space))
    return out


def team_target(agent_policies: Mapping[Any, Callable], spaces: TeamSpaces) -> Callable:
    """The team's target as an `ope.target` function on team observations: the product of
    the agents' targets, each on its own observation slice.

    Args:
      agent_policies: `{agent_id: fn}` in `ope.target`'s protocol on the agent's own
        observations (Discrete: `obs -> probabilities [N, n]`; Box: `obs -> (mean, std)`).
      spaces: from `team_spaces`.
    """
    missing = [a for a in spaces.agents if a not in agent_policies]
    if missing:
        raise OPEError(f"team OPE has no target policy for agents {missing}")
    fns = [agent_policies[a] for a in spaces.agents]

    def joint(obs):
        obs = np.asarray(obs, np.float32)
        outs = [fn(spaces.agent_obs(obs, i)) for i, fn in enumerate(fns)]
        if not spaces.discrete:
            return (np.concatenate([np.asarray(m) for m, _ in outs], axis=1),
                    np.concatenate([np.asarray(s) for _, s in outs], axis=1))
        probs = np.ones((len(obs), 1))
        for p in outs:
            probs = (probs[:, :, None] * np.asarray(p, np.float64)[:, None, :]).reshape(
                len(obs), -1)
        return probs

    return joint


def estimate_team(agent_policies: Mapping[Any, Callable], episodes: Sequence[MultiAgentEpisode],
                  methods: Sequence[str] | dict = DEFAULT_METHODS, *,
                  agents: Sequence | None = None, **options) -> dict[str, dict]:
    """Off-policy estimates of the team return of `agent_policies` on multi-agent episodes
    (`ope.estimate` on the team episodes; see the module docstring).

    Args:
      agent_policies: `{agent_id: fn}` (see `team_target`).
      episodes: the behaviour data.
      methods: estimator names or RLlib's dict, as `ope.estimate`'s.
      agents: the agents' order (default: sorted).
      **options: `ope.estimate`'s keyword options (`gamma`, `fqe`, `num_bootstrap`, ...).
    """
    if not episodes:
        raise OPEError("no multi-agent episodes to evaluate on")
    spaces = team_spaces(episodes, agents)
    return estimate(team_target(agent_policies, spaces), team_episodes(episodes, spaces),
                    methods, action_space=spaces.action_space,
                    observation_space=spaces.observation_space, **options)
