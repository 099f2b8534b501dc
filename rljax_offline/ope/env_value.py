"""The value off-policy estimates stand for, measured in the env: a policy's mean discounted
return over env episodes and its standard error. `rljax-offline evaluate --offline --env`
prints it beside the estimates; `benchmarks/ope.py` takes it as the truth."""

from __future__ import annotations

from typing import Any

import numpy as np

from rljax_offline.acting.env_runner import EnvRunner
from rljax_offline.ope.estimators import discounts


def discounted_env_value(policy: Any, env: Any, gamma: float, num_episodes: int, seed: int,
                         num_envs: int = 8) -> tuple[float, float]:
    """`(mean, standard error)` of `sum_t gamma^t r_t` over env episodes of a policy: the
    truth an off-policy estimate is checked against.

    Args:
      policy: an actor, or a callable `obs -> actions`.
      env: the env id or factory (`EnvRunner` accepts).
      gamma: the discount.
      num_episodes: how many episodes to run.
      seed: the env seed of the first episode.
      num_envs: envs stepped together (at most `num_episodes`).

    Returns:
      The mean discounted return and its standard error.
    """
    runner = EnvRunner(env, policy, num_envs=min(num_envs, num_episodes), seed=seed)
    try:
        episodes = runner.sample(num_episodes=num_episodes)
    finally:
        runner.close()
    values = [float(np.sum(np.asarray(ep.get_rewards()) * discounts(gamma, len(ep))))
              for ep in episodes]
    return float(np.mean(values)), float(np.std(values) / np.sqrt(len(values)))
