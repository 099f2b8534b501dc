"""Recording from a trained policy: any registered algorithm's checkpoint (loaded as a
`TrainedPolicy`, without building the algorithm) acts in an env and its episodes go to
Parquet, as RLlib's guide records from its PPO expert. A checkpoint for other spaces than
the env's is a named error before any episode is recorded."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from rljax_offline.acting.actor import actor_for
from rljax_offline.acting.env_runner import EnvRunner
from rljax_offline.connectors import Spaces
from rljax_offline.errors import PolicyMismatchError
from rljax_offline.learning.trained_policy import TrainedPolicy, load_policy


def check_policy_spaces(policy_spaces: Any, observation_space: gym.Space,
                        action_space: gym.Space, checkpoint: str) -> None:
    """A named error, before anything runs, when the checkpoint's policy cannot act in an
    env with these spaces.

    Args:
      policy_spaces: the policy's `Spaces`.
      observation_space: the env's observation space.
      action_space: the env's action space.
      checkpoint: the checkpoint's path, named by the error.

    Raises:
      PolicyMismatchError: the policy cannot act in an env with these spaces.
    """
    env_spaces = Spaces.of(observation_space, action_space)
    for what in ("observation", "action"):
        theirs, ours = getattr(policy_spaces, what), getattr(env_spaces, what)
        if theirs != ours:
            raise PolicyMismatchError(f"checkpoint {checkpoint!r} holds a policy for the {what} "
                                      f"space {theirs}, but the env has {ours}")


def record_policy(env: Any, checkpoint: str | TrainedPolicy, output: str, *,
                  num_episodes: int = 500, seed: int = 0, num_envs: int = 8,
                  explore: bool = False, env_config: dict | None = None,
                  progress: bool = True, **write_options) -> list[str]:
    """Records episodes of a trained policy to Parquet, as RLlib's guide does with its PPO
    expert: `checkpoint` is a checkpoint folder of any registered algorithm (PPO, BC, MARWIL,
    CQL, IQL, ...; loaded as a `TrainedPolicy`, no algorithm is built) or a `TrainedPolicy`,
    acting greedily unless `explore`. A policy for other spaces than `env`'s is a
    `PolicyMismatchError` before any episode is recorded. Returns the files written.

    Args:
      env: a gymnasium id or a factory `env_config -> gym.Env`.
      checkpoint: a checkpoint folder or a `TrainedPolicy`.
      output: the output folder.
      num_episodes: episodes to record.
      seed: the envs' seed.
      num_envs: env copies stepped together.
      explore: sample actions (True) or act greedily.
      env_config: the factory's argument.
      progress: print progress.
      **write_options: `EpisodeWriter`'s options.

    Returns:
      The files written.

    Raises:
      PolicyMismatchError: the policy acts in other spaces than the env's.
    """
    policy = checkpoint if isinstance(checkpoint, TrainedPolicy) else load_policy(checkpoint)
    where = checkpoint if isinstance(checkpoint, str) else f"<{policy.algo_name} policy>"
    runner = EnvRunner(env, actor_for(policy, explore), num_envs=num_envs, seed=seed,
                       env_config=env_config)
    try:
        check_policy_spaces(policy.spaces, runner.observation_space, runner.action_space,
                            where)
        return runner.record(output, num_episodes=num_episodes, progress=progress,
                             **write_options)
    finally:
        runner.close()
