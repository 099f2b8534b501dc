"""`SAC`: the online off-policy algorithm (RLlib's SAC), around the same facade as PPO.

Everything around the learner is the offline `Algorithm`'s (spaces, connector pipelines,
acting, evaluation, checkpoints); what differs is where the data comes from. Each `train()`:

1. samples `min_sample_timesteps_per_iteration` env steps with the exploring policy from
   `num_envs_per_env_runner` gymnasium vector envs (`EnvRunner.sample_continuing`: episodes
   continue across iterations); with `offline_data(output=DIR)` every finished episode is
   also written to Parquet (its chunks joined; `action_logp` and `action_dist_inputs`
   recorded per step);
2. runs the learner pipeline on the chunks (n-step returns included) and adds the rows to
   the on-device replay buffer (`data.replay`, replicated on every device; one jitted `add`
   of a fixed shape, the old buffer donated);
3. once `num_steps_sampled_before_learning_starts` rows were added, runs
   `config.updates_per_iteration` updates in one jitted `lax.scan`, each on a minibatch
   sampled on the device (`DataParallel.scan_on_buffer`).

Offline-to-online (`training(init_from=<checkpoint>)`): the actor, the Q networks and their
targets (and the temperature, where the checkpoint learned one: CQL) start from a CQL, IQL or
SAC checkpoint with a tanh-squashed actor and as many Q networks (`twin_q`); anything else is
a one-line `PolicyMismatchError` saying why (`algorithms.fine_tuning`).

The replay buffer is saved with a checkpoint only with `store_buffer_in_checkpoints=True`
(RLlib's name and default, False): without it a restored SAC refills its buffer for
`num_steps_sampled_before_learning_starts` steps before it updates again.
"""

from __future__ import annotations

import dataclasses
import time

import jax
import numpy as np
from flax import serialization

from rljax_offline.algorithms.algorithm import MODULE_ID
from rljax_offline.algorithms.config import ConfigError
from rljax_offline.algorithms.fine_tuning import check_same_shapes, load_start
from rljax_offline.algorithms.online import OnlineAlgorithm
from rljax_offline.data.replay import ReplayState, make_replay_buffer
from rljax_offline.errors import PolicyMismatchError
from rljax_offline.learning import checkpoint as ckpt

BUFFER_FILE = "replay_buffer.msgpack"
_STARTS_SAC = ("SAC starts from a Box policy with a tanh-squashed Gaussian actor and Q "
               "networks: awac, cal_ql, cql, crr, iql (actor_squashed=True), sac")


class SAC(OnlineAlgorithm):
    """Online SAC (see the module docstring). Build with `SACConfig().build()`."""

    _buffer_state = None
    _scan = None
    rows_added = 0
    started_from: str | None = None

    def __init__(self, config, process=None):
        super().__init__(config, process)
        if self.multi_process:
            raise ConfigError("SACConfig trains in one process (its env runner and replay "
                              "buffer are local); use num_devices for several devices")
        self.buffer = make_replay_buffer(capacity=config.replay_buffer_config.get(
            "capacity", 1_000_000), batch_size=self.dp.batch_size)
        self._add = jax.jit(self.buffer.add, donate_argnums=0,
                            out_shardings=self.dp.replicated)
        # A rollout takes at least the steps asked for, at most one more per env.
        self._rows_per_add = config.min_sample_timesteps_per_iteration + (
            config.num_envs_per_env_runner)

    # ------------------------------------------------------------------ offline-to-online

    def start_from(self, path: str) -> None:
        """Actor, Q networks and targets (and a learned temperature) from a checkpoint."""
        start = load_start(path, self.spaces, self.spec.acting, "SAC", _STARTS_SAC)
        mine = jax.device_get(self.state.params)
        if "q" not in start.params:
            raise PolicyMismatchError(f"checkpoint {path!r} ({start.algo_name}) cannot start "
                                      f"SAC: it has no Q networks; {_STARTS_SAC}")
        theirs_k = len(jax.tree_util.tree_leaves(start.params["q"])[0])
        mine_k = len(jax.tree_util.tree_leaves(mine["q"])[0])
        if theirs_k != mine_k:
            raise PolicyMismatchError(f"checkpoint {path!r} ({start.algo_name}) has "
                                      f"{theirs_k} Q network(s), this config's twin_q="
                                      f"{self.config.twin_q} needs {mine_k}")
        if jax.tree_util.tree_leaves(start.connector_state) and not jax.tree_util.tree_leaves(
                self._initial_connector_state):
            raise PolicyMismatchError(f"checkpoint {path!r} ({start.algo_name}) acts on "
                                      "observations its fitted connector transforms; SAC's "
                                      "pipeline has no such piece")
        why = f"model_config {self.config.model_config}"
        check_same_shapes(path, "policy network", start.params["policy"], mine["policy"], why)
        check_same_shapes(path, "Q networks", start.params["q"], mine["q"], why)
        params = {**mine, "policy": start.params["policy"], "q": start.params["q"],
                  "target_q": start.params.get("target_q", start.params["q"])}
        if "log_alpha" in start.params:
            params["log_alpha"] = np.asarray(start.params["log_alpha"], np.float32)
        self.state = self.dp.put_replicated(self.state._replace(params=params))
        self.started_from = path

    # ------------------------------------------------------------------ sampling

    def sample(self):
        """One iteration's rollouts: `(episode chunks, [(return, length)] finished)`."""
        return self.sample_steps(self.config.min_sample_timesteps_per_iteration)

    # ------------------------------------------------------------------ training

    def _add_rows(self, cols: dict, count: int) -> None:
        """The rollout's learner rows into the replay buffer, padded to one fixed shape."""
        size = max(self._rows_per_add, count)
        if size > self._rows_per_add:  # more rows than one rollout can make: a new shape
            self._rows_per_add = 1 << (size - 1).bit_length()
        pad = self._rows_per_add - count
        rows = jax.tree_util.tree_map(
            lambda x: np.concatenate([x, np.zeros((pad, *x.shape[1:]), x.dtype)]), cols)
        if self._buffer_state is None:
            self._buffer_state = self.dp.put_replicated(self.buffer.init(rows))
        self._buffer_state = self._add(self._buffer_state, rows, np.int32(count))
        self.rows_added += count

    def train(self) -> dict:
        t0 = time.perf_counter()
        c = self.config
        chunks, finished = self.sample()
        sample_s = time.perf_counter() - t0
        steps = sum(len(ep) for ep in chunks)
        cols, cstate, _ = self.data.columns(chunks, jax.device_get(self.state.connector_state),
                                            fit=True)
        self.state = self.state._replace(connector_state=self.dp.put_replicated(cstate))
        self._add_rows(cols, len(cols["obs"]))
        learner, t_upd, n = {}, time.perf_counter(), 0
        if self.rows_added >= max(c.num_steps_sampled_before_learning_starts, 1):
            n = c.updates_per_iteration
            if self._scan is None:
                self._scan = self.dp.scan_on_buffer(n, self.buffer.sample)
            self.state, metrics = self._scan(self.state, self._buffer_state)
            learner = {k: float(v) for k, v in jax.device_get(metrics).items()}
        update_s = time.perf_counter() - t_upd
        trained = n * self.dp.batch_size
        return self._iteration_result(
            t0, steps, finished, sample_s,
            {MODULE_ID: {**learner, "num_module_steps_trained": trained},
             "__all_modules__": {"num_env_steps_trained": trained,
                                 "learner_update_timer": update_s / max(n, 1)}},
            replay_buffer={"rows_added_lifetime": self.rows_added,
                           "capacity": self.buffer.capacity},
            started_from=self.started_from)

    # ------------------------------------------------------------------ checkpoints

    def checkpoint_files(self) -> dict[str, bytes]:
        """The replay buffer, when `store_buffer_in_checkpoints`."""
        files = {}
        if self.config.store_buffer_in_checkpoints and self._buffer_state is not None:
            files[BUFFER_FILE] = serialization.msgpack_serialize(
                {"rows_added": self.rows_added, "rows_per_add": self._rows_per_add,
                 "buffer": jax.device_get({f.name: getattr(self._buffer_state, f.name)
                                           for f in dataclasses.fields(ReplayState)})})
        return files

    def restore(self, path: str) -> None:
        super().restore(path)
        raw = ckpt.load_file(path, BUFFER_FILE) if self.config.store_buffer_in_checkpoints \
            else None
        if raw is not None:
            saved = serialization.msgpack_restore(raw)
            self._buffer_state = self.dp.put_replicated(ReplayState(**saved["buffer"]))
            self.rows_added, self._rows_per_add = (int(saved["rows_added"]),
                                                   int(saved["rows_per_add"]))
