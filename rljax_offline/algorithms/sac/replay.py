"""`Replay`: SAC's data source, an on-device replay buffer the rollouts fill and the updates
sample.

The online facade (`algorithms.online.OnlineAlgorithm.train`, the one loop) samples
`min_sample_timesteps_per_iteration` env steps with the exploring policy and hands them here;
this source runs the learner pipeline on the chunks (n-step returns included), adds the rows
to the buffer (`data.replay`, replicated on every device; one jitted `add` of a fixed shape,
the old buffer donated) and, once `num_steps_sampled_before_learning_starts` rows were added,
runs `updates_per_iteration` updates in one jitted `lax.scan`, each on a minibatch sampled on
the device (`DataParallel.scan_on_buffer`).

The buffer goes into a checkpoint only with `store_buffer_in_checkpoints=True` (RLlib's name
and default, False): without it a restored SAC refills it for
`num_steps_sampled_before_learning_starts` steps before it updates again.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np
from flax import serialization

from rljax_offline.algorithms.data_sources import MODULE_ID
from rljax_offline.data.replay import ReplayState, make_replay_buffer
from rljax_offline.learning import checkpoint as ckpt

BUFFER_FILE = "replay_buffer.msgpack"


class Replay:
    """SAC's data source (see the module docstring); the online facade's `source`.

    Args:
      config: the SAC config (`replay_buffer_config`, the rollout size).
      dp: the learner's data-parallel runtime (the buffer is replicated on its devices).
      batch_size: rows each update samples from the buffer (default: the whole minibatch).
    """

    def __init__(self, config: Any, dp: Any, batch_size: int | None = None):
        self.config, self.dp = config, dp
        self.buffer = make_replay_buffer(capacity=config.replay_buffer_config.get(
            "capacity", 1_000_000), batch_size=batch_size or dp.batch_size)
        self._add = jax.jit(self.buffer.add, donate_argnums=0, out_shardings=dp.replicated)
        # A rollout takes at least the steps asked for, at most one more per env.
        self._rows_per_add = config.min_sample_timesteps_per_iteration + (
            config.num_envs_per_env_runner)
        self.buffer_state = None
        self.rows_added = 0
        self._scan = None

    def sample(self, algo: Any):
        """One iteration's rollouts: `(episode chunks, [(return, length)] finished)`."""
        return algo.sample_steps(self.config.min_sample_timesteps_per_iteration)

    def add(self, cols: dict, count: int) -> None:
        """A rollout's learner rows into the buffer, padded to one fixed shape."""
        size = max(self._rows_per_add, count)
        if size > self._rows_per_add:  # more rows than one rollout can make: a new shape
            self._rows_per_add = 1 << (size - 1).bit_length()
        pad = self._rows_per_add - count
        rows = jax.tree_util.tree_map(
            lambda x: np.concatenate([x, np.zeros((pad, *x.shape[1:]), x.dtype)]), cols)
        if self.buffer_state is None:
            self.buffer_state = self.dp.put_replicated(self.buffer.init(rows))
        self.buffer_state = self._add(self.buffer_state, rows, np.int32(count))
        self.rows_added += count

    def update(self, algo: Any, chunks: list, steps: int) -> tuple[dict, dict, int]:
        """Adds the rollout `chunks` and trains `algo` on the buffer; returns its learner
        metrics, the result's other fields and the number of updates."""
        c = self.config
        cols, cstate, _ = algo.data.columns(chunks, jax.device_get(algo.state.connector_state),
                                            fit=True)
        algo.state = algo.state._replace(connector_state=self.dp.put_replicated(cstate))
        self.add(cols, len(cols["obs"]))
        learner, n = {}, 0
        if self.rows_added >= max(c.num_steps_sampled_before_learning_starts, 1):
            n = c.updates_per_iteration
            if self._scan is None:
                self._scan = self.dp.scan_on_buffer(n, self.buffer.sample)
            algo.state, metrics = self._scan(algo.state, self.buffer_state)
            learner = {k: float(v) for k, v in jax.device_get(metrics).items()}
        return (*self.report(algo, learner, n), n)

    def report(self, algo: Any, learner: dict, n: int, **buffer_fields) -> tuple[dict, dict]:
        """RLlib's learner metrics of `n` updates (`learner`: their loss metrics) and the
        result's fields of the buffer (`buffer_fields` added) and of the start."""
        trained = n * self.dp.batch_size
        learners = {MODULE_ID: {**learner, "num_module_steps_trained": trained},
                    "__all_modules__": {"num_env_steps_trained": trained}}
        fields = {"replay_buffer": {"rows_added_lifetime": self.rows_added,
                                    "capacity": self.buffer.capacity, **buffer_fields},
                  "started_from": algo.started_from}
        return learners, fields

    def checkpoint_files(self) -> dict[str, bytes]:
        """The buffer, when `store_buffer_in_checkpoints`."""
        files = {}
        if self.config.store_buffer_in_checkpoints and self.buffer_state is not None:
            files[BUFFER_FILE] = serialization.msgpack_serialize(
                {"rows_added": self.rows_added, "rows_per_add": self._rows_per_add,
                 "buffer": jax.device_get({f.name: getattr(self.buffer_state, f.name)
                                           for f in dataclasses.fields(ReplayState)})})
        return files

    def restore(self, algo: Any, path: str) -> None:
        """The buffer of the checkpoint at `path`, where it holds one."""
        raw = ckpt.load_file(path, BUFFER_FILE) if self.config.store_buffer_in_checkpoints \
            else None
        if raw is not None:
            saved = serialization.msgpack_restore(raw)
            self.buffer_state = self.dp.put_replicated(ReplayState(**saved["buffer"]))
            self.rows_added, self._rows_per_add = (int(saved["rows_added"]),
                                                   int(saved["rows_per_add"]))

    def stop(self) -> None:
        """Nothing to close: the buffer lives on the devices."""
