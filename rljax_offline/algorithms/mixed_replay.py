"""`MixedReplay`: the data source of online fine-tuning (`algorithms.online_fine_tuning`): each
update's minibatch mixes rows of the offline data with rows of an online replay buffer.

Per iteration it samples whole episodes (at least `min_sample_timesteps_per_iteration` env
steps) with the exploring policy: a piece that reads the whole episode (Cal-QL's returns to
go) then sees it whole. Their learner rows, made by the same learner pipeline and fitted
connector state as the offline rows, go into SAC's on-device ring (`sac.replay.Replay`).
Once `num_steps_sampled_before_learning_starts` rows were added, every sampled env step buys
`replay_updates_per_iteration / min_sample_timesteps_per_iteration` updates (one, by
default), run in jitted `lax.scan`s of `replay_updates_per_iteration` updates; what a scan
does not use up is owed to the next iteration, so the ratio holds over the run without a
program per episode length.

Each minibatch holds `round(offline_fraction * train_batch_size_per_learner)` rows drawn
uniformly from the offline data (read on the first iteration, replicated on every device as
one full ring) and the rest from the online ring (Cal-QL's 50/50 with the default 0.5). Every
device draws the same global minibatch and trains on its slice, so any device count gives
the one-device result.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

from rljax_offline.algorithms.sac.replay import Replay
from rljax_offline.data.replay import ReplayBuffer, make_replay_buffer
from rljax_offline.learning import checkpoint as ckpt

OWED_FILE = "mixed_replay.msgpack"


def mixed_sampler(offline: ReplayBuffer | None, online: ReplayBuffer):
    """`sample((offline_state, online_state), key) -> batch`: `offline.batch_size` rows drawn
    from the offline ring, then `online.batch_size` from the online one (online only when
    `offline` is None); pure, for `DataParallel.scan_on_buffer`.

    Args:
      offline: the ring holding the offline rows (None: no offline rows in a minibatch).
      online: the online replay ring.
    """

    def sample(buffers: tuple, key: jax.Array) -> dict:
        offline_state, online_state = buffers
        k_off, k_on = jax.random.split(key)
        rows = online.sample(online_state, k_on)
        if offline is None:
            return rows
        return jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b]),
                                      offline.sample(offline_state, k_off), rows)

    return sample


class MixedReplay(Replay):
    """Online fine-tuning's data source (see the module docstring).

    Args:
      config: the fine-tuning config (`FineTuningOptions`, the replay options).
      dp: the learner's data-parallel runtime.
    """

    def __init__(self, config: Any, dp: Any):
        self.offline_rows = round(config.offline_fraction * dp.batch_size)
        super().__init__(config, dp, batch_size=max(dp.batch_size - self.offline_rows, 1))
        self.offline_ring, self.offline_state = None, None
        self.num_offline_rows = 0
        self.owed = 0.0  # updates earned by sampled steps and not run yet

    # ------------------------------------------------------------------ data

    def _read_offline(self, algo: Any) -> None:
        """The offline data's learner rows, replicated on the devices as one full ring. The
        connector state is fitted on them unless it came from a checkpoint (`init_from`,
        `restore`): then the rows are transformed as that training saw them."""
        cols, cstate, _, _ = algo.data.read_columns(
            jax.device_get(algo.state.connector_state), fit=not algo.learner_loaded)
        algo.state = algo.state._replace(connector_state=self.dp.put_replicated(cstate))
        n = len(cols["obs"])
        self.offline_ring = make_replay_buffer(capacity=n, batch_size=self.offline_rows)
        ring = self.offline_ring
        self.offline_state = self.dp.put_replicated(ring.add(ring.init(cols), cols))
        self.num_offline_rows = n

    def sample(self, algo: Any):
        """Whole episodes of at least `min_sample_timesteps_per_iteration` steps (the
        offline rows are read on the first call)."""
        if self.offline_rows and self.offline_state is None:
            self._read_offline(algo)
        return algo.sample_steps(self.config.min_sample_timesteps_per_iteration, complete=True)

    def sample_minibatch(self, key: jax.Array) -> dict:
        """One global minibatch as the updates draw it (the offline rows first)."""
        return self.sampler()((self.offline_state, self.buffer_state), key)

    def sampler(self):
        """The minibatch sampler of the rings (`mixed_sampler`)."""
        return mixed_sampler(self.offline_ring if self.offline_rows else None, self.buffer)

    # ------------------------------------------------------------------ updates

    def update(self, algo: Any, chunks: list, steps: int) -> tuple[dict, dict, int]:
        """Adds the episodes' learner rows and runs the updates their steps bought."""
        c = self.config
        cols, _, _ = algo.data.columns(chunks, jax.device_get(algo.state.connector_state),
                                       fit=False)
        self.add(cols, len(cols["obs"]))
        per_scan = c.replay_updates_per_iteration
        if self.rows_added >= max(c.num_steps_sampled_before_learning_starts, 1):
            self.owed += steps * per_scan / c.min_sample_timesteps_per_iteration
        learner, n = {}, 0
        if self.owed >= per_scan and self._scan is None:
            self._scan = self.dp.scan_on_buffer(per_scan, self.sampler())
        while self.owed >= per_scan:
            algo.state, metrics = self._scan(algo.state, (self.offline_state,
                                                          self.buffer_state))
            learner = metrics
            self.owed -= per_scan
            n += per_scan
        if n:
            learner = {k: float(v) for k, v in jax.device_get(learner).items()}
        return (*self.report(algo, learner, n, offline_rows=self.num_offline_rows,
                             offline_rows_per_update=self.offline_rows), n)

    # ------------------------------------------------------------------ checkpoints

    def checkpoint_files(self) -> dict[str, bytes]:
        """The updates owed (always) and the online ring (with
        `store_buffer_in_checkpoints`); the offline rows are read again on resume."""
        return {**super().checkpoint_files(),
                OWED_FILE: serialization.msgpack_serialize({"owed": np.float64(self.owed)})}

    def restore(self, algo: Any, path: str) -> None:
        super().restore(algo, path)
        raw = ckpt.load_file(path, OWED_FILE)
        if raw is not None:
            self.owed = float(serialization.msgpack_restore(raw)["owed"])
