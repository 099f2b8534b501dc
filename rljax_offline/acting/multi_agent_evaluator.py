"""`MultiAgentEvaluator`: the multi-agent evaluation env runner as an owner of its state (the
env copies, made on the first evaluation and kept), stepped by the module policies it is
handed, reporting RLlib's multi-agent metrics (`acting.multi_agent_metrics`). The offline
multi-agent facade and IPPO each own one."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rljax_offline.acting.multi_agent_metrics import team_metrics
from rljax_offline.acting.multi_agent_runner import MultiAgentEnvRunner

__all__ = ["EVALUATION_SEED_OFFSET", "MultiAgentEvaluator"]

# Evaluation envs reset from `seed + this`: never the sampling envs' seeds.
EVALUATION_SEED_OFFSET = 1_000_003


class MultiAgentEvaluator:
    """The multi-agent evaluation runner (see the module docstring).

    Args:
      env_fn: `() -> env` (a PettingZoo parallel env or an RLlib-style dict env).
      mapping: `(agent_id, episode) -> module id`.
      max_envs: env copies at most (`evaluation_num_envs`); the first evaluation makes
        `min(max_envs, num_episodes)`.
      seed: the run's seed (the envs reset from `seed + EVALUATION_SEED_OFFSET` on).
    """

    def __init__(self, env_fn: Callable[[], Any], mapping: Callable, *, max_envs: int,
                 seed: int):
        self.env_fn, self.mapping, self.max_envs, self.seed = env_fn, mapping, max_envs, seed
        self._runner: MultiAgentEnvRunner | None = None

    def sample(self, policies: dict, num_episodes: int) -> list:
        """`num_episodes` multi-agent episodes of `policies` (`{module_id: policy}`)."""
        if self._runner is None:
            self._runner = MultiAgentEnvRunner(
                self.env_fn, policies, agent_to_module_mapping_fn=self.mapping,
                num_envs=min(self.max_envs, num_episodes),
                seed=self.seed + EVALUATION_SEED_OFFSET)
        self._runner.policies = dict(policies)
        return self._runner.sample(num_episodes)

    def evaluate(self, policies: dict, num_episodes: int,
                 on_episodes: Callable | None = None) -> dict:
        """RLlib's multi-agent `env_runners` metrics of `sample`'s episodes (the team return
        `episode_return_mean`, `agent_episode_returns_mean`, `module_episode_returns_mean`)
        and the time they took.

        Args:
          policies: `{module_id: policy}`.
          num_episodes: how many episodes.
          on_episodes: given the episodes (what `offline_data(output=...)` records), if
            not None.
        """
        t0 = time.perf_counter()
        episodes = self.sample(policies, num_episodes)
        if on_episodes is not None:
            on_episodes(episodes)
        return {**team_metrics(episodes, self.mapping),
                "evaluation_time_s": time.perf_counter() - t0}

    def close(self) -> None:
        """Closes the env copies (a later evaluation makes them again)."""
        if self._runner is not None:
            self._runner.close()
            self._runner = None
