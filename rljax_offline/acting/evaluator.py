"""`Evaluator`: the evaluation env runner (RLlib's evaluation `EnvRunner`) as an owner of its
state: the vector envs, made on the first evaluation and kept (so each evaluation does not pay
for making them), stepped by the actor it is handed, seeded per iteration so an evaluation
never shares env seeds with sampling or with another iteration's (`env_runner.stream_seed`).

The `Algorithm` facade owns one (`Algorithm.evaluator`) and hands it the current actor;
anything holding a `TrainedPolicy` can do the same (`acting.actor.actor_for`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rljax_offline.acting.env_runner import EVALUATION, EnvRunner, episode_stats, stream_seed
from rljax_offline.episode.episode import Episode


class Evaluator:
    """The evaluation env runner (see the module docstring).

    Args:
      env: a gymnasium env id or a factory `env_config -> env`.
      env_config: the factory's argument.
      max_envs: vector envs at most (`evaluation_num_envs`); the first evaluation makes
        `min(max_envs, num_episodes)`.
      seed: the run's seed (each iteration's evaluation seeds from it).
      on_episodes: called with every evaluation's episodes (recording them:
        `offline_data(output=...)`).
    """

    def __init__(self, env: Any, *, env_config: dict | None = None, max_envs: int = 1,
                 seed: int = 0, on_episodes: Callable[[list[Episode]], None] | None = None):
        self.env, self.env_config, self.max_envs, self.seed = env, env_config, max_envs, seed
        self.on_episodes = on_episodes
        self._runner: EnvRunner | None = None

    def sample(self, actor: Any, num_episodes: int, iteration: int) -> list[Episode]:
        """`num_episodes` episodes of `actor` (an `acting.protocol` actor) in the envs,
        seeded for `iteration`."""
        if self._runner is None:
            self._runner = EnvRunner(self.env, actor,
                                     num_envs=min(self.max_envs, num_episodes),
                                     seed=stream_seed(self.seed, EVALUATION),
                                     env_config=self.env_config)
        self._runner.policy = actor
        self._runner.seed = stream_seed(self.seed, EVALUATION, iteration)
        return self._runner.sample(num_episodes=num_episodes)

    def evaluate(self, actor: Any, num_episodes: int, iteration: int) -> dict:
        """RLlib's `env_runners` metrics of `sample`'s episodes, and the time it took."""
        t0 = time.perf_counter()
        episodes = self.sample(actor, num_episodes, iteration)
        if self.on_episodes is not None:
            self.on_episodes(episodes)
        stats = episode_stats(episodes)
        stats["evaluation_time_s"] = time.perf_counter() - t0
        return stats

    def close(self) -> None:
        """Closes the envs (a later evaluation makes them again)."""
        if self._runner is not None:
            self._runner.close()
            self._runner = None
