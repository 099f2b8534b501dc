"""Recording from a trained policy: any registered algorithm's checkpoint acts in an env and
its episodes go to Parquet, as RLlib's guide records from its PPO expert. A checkpoint for other
spaces than the env's is a named error before any episode is recorded."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from rljax_offline.acting.env_runner import EnvRunner
from rljax_offline.algorithms.algorithm import Algorithm
from rljax_offline.connectors import Spaces
from rljax_offline.errors import PolicyMismatchError


def check_policy_spaces(policy_spaces: Any, observation_space: gym.Space,
                        action_space: gym.Space, checkpoint: str) -> None:
    """A named error, before anything runs, when the checkpoint's policy cannot act in an
    env with these spaces."""
    env_spaces = Spaces.of(observation_space, action_space)
    for what in ("observation", "action"):
        theirs, ours = getattr(policy_spaces, what), getattr(env_spaces, what)
        if theirs != ours:
            raise PolicyMismatchError(f"checkpoint {checkpoint!r} holds a policy for the {what} "
                                      f"space {theirs}, but the env has {ours}")


def record_policy(env: Any, checkpoint: str, output: str, *, num_episodes: int = 500,
                  seed: int = 0, num_envs: int = 8, explore: bool = False,
                  env_config: dict | None = None, progress: bool = True,
                  **write_options) -> list[str]:
    """Records episodes of a trained policy to Parquet, as RLlib's guide does with its PPO
    expert: `checkpoint` is a checkpoint of any registered algorithm (PPO, BC, MARWIL, CQL,
    IQL, ...), acting greedily unless `explore`. A policy for other spaces than `env`'s is a
    `PolicyMismatchError` before any episode is recorded. Returns the files written."""
    algo = Algorithm.from_checkpoint(checkpoint)
    runner = None
    try:
        runner = EnvRunner(env, algo.actor(explore), num_envs=num_envs, seed=seed,
                           env_config=env_config)
        check_policy_spaces(algo.spaces, runner.observation_space, runner.action_space,
                            checkpoint)
        return runner.record(output, num_episodes=num_episodes, progress=progress,
                             **write_options)
    finally:
        if runner is not None:
            runner.close()
        algo.stop()
