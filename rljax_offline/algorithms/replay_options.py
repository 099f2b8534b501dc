"""The options of learning online from a replay buffer (RLlib's SAC names), shared by SAC and by
the online fine-tuning of an offline algorithm (`algorithms.fine_tuning_options`): how many env
steps an iteration samples, how large the buffer is, when learning starts and how many updates
each sampled step buys."""

from __future__ import annotations

import dataclasses

from rljax_offline.algorithms.options import (
    boolean,
    non_negative_int,
    option,
    optional,
    positive_float,
    positive_int,
)


def replay_capacity(v) -> str | None:
    ok = isinstance(v, dict) and set(v) <= {"capacity", "type"} and (
        isinstance(v.get("capacity", 1), int) and v.get("capacity", 1) > 0)
    return None if ok else "a dict {'capacity': positive int} (optionally 'type')"


@dataclasses.dataclass(frozen=True)
class ReplayOptions:
    """Sampling into a replay buffer and updating from it (see the module docstring)."""

    num_steps_sampled_before_learning_starts: int = option(
        1500, "training", non_negative_int, "env steps sampled before the first update")
    replay_buffer_config: dict = option({"capacity": 1_000_000}, "training", replay_capacity,
                                        "the replay buffer: {'capacity': rows}")
    store_buffer_in_checkpoints: bool = option(
        False, "training", boolean, "save the replay buffer with every checkpoint (a restored "
        "run then updates at once on the same rows)")
    training_intensity: float | None = option(
        None, "training", optional(positive_float), "trained / sampled steps, i.e. updates x "
        "train_batch_size_per_learner per env step (None: one update per env step)")
    num_envs_per_env_runner: int = option(1, "env_runners", positive_int,
                                          "vectorised envs sampled together")
    min_sample_timesteps_per_iteration: int = option(
        100, "reporting", positive_int, "env steps one train() samples")

    @property
    def replay_updates_per_iteration(self) -> int:
        """Updates one `train()` runs once learning started: `training_intensity` trained
        steps per sampled step (None: one update per env step)."""
        steps = self.min_sample_timesteps_per_iteration
        if self.training_intensity is None:
            return steps
        return max(1, round(steps * self.training_intensity / self.train_batch_size_per_learner))
