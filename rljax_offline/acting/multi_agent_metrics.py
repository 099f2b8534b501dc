"""RLlib's multi-agent env-runner metrics of finished multi-agent episodes: the team return
(`episode_return_mean`: the sum over agents, as RLlib's multi-agent metrics sum them), and
its split by agent and by module."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from rljax_offline.episode.multi_agent import MultiAgentEpisode

__all__ = ["team_metrics"]


def team_metrics(episodes: Sequence[MultiAgentEpisode], mapping: Callable) -> dict:
    """`episode_return_mean` / `_std` / `_min` / `_max` (team returns), `episode_len_mean`
    (env steps), `num_episodes`, `agent_episode_returns_mean` and
    `module_episode_returns_mean`.

    Args:
      episodes: finished multi-agent episodes (at least one).
      mapping: `(agent_id, episode) -> module id`.
    """
    team = np.array([ep.get_return() for ep in episodes])
    per_agent: dict = {}
    per_module: dict = {}
    for ep in episodes:
        for agent_id, agent_ep in ep.agent_episodes.items():
            r = float(agent_ep.get_return())
            per_agent.setdefault(agent_id, []).append(r)
            per_module.setdefault(mapping(agent_id, ep), []).append(r)
    return {"episode_return_mean": float(team.mean()),
            "episode_return_std": float(team.std()),
            "episode_return_min": float(team.min()),
            "episode_return_max": float(team.max()),
            "episode_len_mean": float(np.mean([ep.env_steps() for ep in episodes])),
            "num_episodes": len(episodes),
            "agent_episode_returns_mean": {str(a): float(np.mean(v))
                                           for a, v in per_agent.items()},
            "module_episode_returns_mean": {m: float(np.mean(v))
                                            for m, v in per_module.items()}}
