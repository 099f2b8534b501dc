"""The offline data sources: where an iteration's updates take their data from.

Every algorithm trains through one loop (`Algorithm.train`): its data source samples what the
iteration needs, then runs the updates on it and says what it did. A data source has

* `sample(algo) -> (episode chunks, [(return, length)] finished)`: what the env gave this
  iteration (offline: nothing; the data is read on the first call);
* `update(algo, chunks, steps) -> (learners, result fields, num_updates)`: the updates,
  their RLlib learner metrics (device arrays allowed: the loop fetches them) and any fields
  the iteration's result adds;
* `checkpoint_files()`, `restore(algo, path)` and `stop()`: what it adds to a checkpoint,
  reads back from one, and closes.

Here are the two offline ones over `algorithms.offline_data.OfflineData`: `Materialized`
(the learner columns on the devices, minibatches drawn there) and `Streamed` (global batches
read with a resumable cursor, whose position the checkpoint holds through `OfflineData`).
The online ones: PPO's `ppo.rollouts.Rollouts` and SAC's `sac.replay.Replay`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MODULE_ID = "default_policy"


def offline_learners(algo: Any, metrics: dict, num_updates: int) -> dict:
    """RLlib's learner metrics of `num_updates` offline updates (`metrics` as the learner
    returned them, device arrays; the state's scalar statistics added)."""
    extra = {k: v for k, v in algo.state.extra.items() if np.ndim(v) == 0}
    steps = num_updates * algo.timesteps_per_update
    lifetime = steps * (algo.iteration + 1)
    return {MODULE_ID: {**metrics, **extra, "num_module_steps_trained": steps,
                        "num_module_steps_trained_lifetime": lifetime},
            "__all_modules__": {"num_env_steps_trained": steps,
                                "num_env_steps_trained_lifetime": lifetime}}


class _Offline:
    """What both offline sources share: the data read on the first `sample`, nothing of
    their own in a checkpoint (the stream cursor is `OfflineData`'s)."""

    def __init__(self, data: Any):
        self.data = data

    def sample(self, algo: Any):
        """Offline: no env steps; reads the data on the first iteration (as RLlib does)."""
        if self.data.device_data is None and self.data.stream is None:
            algo.load_data()
        return [], []

    def checkpoint_files(self) -> dict[str, bytes]:
        """None of its own."""
        return {}

    def restore(self, algo: Any, path: str) -> None:
        """Nothing of its own to restore."""

    def stop(self) -> None:
        """Ends the prefetch thread of streamed data, keeping its cursor."""
        self.data.stop()


class Materialized(_Offline):
    """The learner columns materialized on the devices; each update draws its minibatch
    there (`Learner.step` on `DeviceData`, by the config's `sample_unit`; windows of the
    sequence model's context for "windows").

    Args:
      data: the algorithm's `OfflineData`.
    """

    def update(self, algo: Any, chunks: list, steps: int) -> tuple[dict, dict, int]:
        """`updates_per_iteration` updates, dispatched; their metrics as device arrays."""
        n = algo.config.updates_per_iteration
        metrics = algo.learner.step(n, self.data.device_data, algo.config.sample_unit,
                                    algo.sample_window)
        return offline_learners(algo, metrics, n), {}, n


class Streamed(_Offline):
    """Global batches streamed from the files with a resumable cursor (`Learner.step` on
    the stream); the stream's fitted connector state goes back to the learner.

    Args:
      data: the algorithm's `OfflineData`.
    """

    def update(self, algo: Any, chunks: list, steps: int) -> tuple[dict, dict, int]:
        """`updates_per_iteration` updates on streamed batches; their metrics."""
        n = algo.config.updates_per_iteration
        metrics = algo.learner.step(n, self.data.stream)
        # Put from a host copy: a device_put can alias the prefetch thread's buffers, which
        # the next update donates.
        algo.learner.put_connector_state(self.data.streamed_connector_state())
        return offline_learners(algo, metrics, n), {}, n
