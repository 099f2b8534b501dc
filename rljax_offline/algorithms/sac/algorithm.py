"""`SAC`: the online off-policy algorithm (RLlib's SAC), around the same facade as PPO.

Everything around the learner is the online facade's (`algorithms.online`: spaces,
connector pipelines, acting, evaluation, checkpoints, the one training loop); what differs is
where the data comes from, SAC's data source `sac.replay.Replay`: each iteration samples
`min_sample_timesteps_per_iteration` env steps with the exploring policy from
`num_envs_per_env_runner` gymnasium vector envs (episodes continue across iterations; with
`offline_data(output=DIR)` every finished episode is also written to Parquet, `action_logp`
and `action_dist_inputs` recorded per step), and the source adds their learner rows (n-step
returns included) to its on-device replay buffer and, once
`num_steps_sampled_before_learning_starts` rows were added, runs `updates_per_iteration`
updates on minibatches sampled on the device.

Offline-to-online (`training(init_from=<checkpoint>)`): the actor, the Q networks and their
targets (and the temperature, where the checkpoint learned one: CQL) start from a CQL, IQL or
SAC checkpoint with a tanh-squashed actor and as many Q networks (`twin_q`); anything else is
a one-line `PolicyMismatchError` saying why (`algorithms.fine_tuning`).

The replay buffer is saved with a checkpoint only with `store_buffer_in_checkpoints=True`
(RLlib's name and default, False; `sac.replay`).
"""

from __future__ import annotations

import jax
import numpy as np

from rljax_offline.algorithms.config import ConfigError
from rljax_offline.algorithms.fine_tuning import check_same_shapes, load_start
from rljax_offline.algorithms.online import OnlineAlgorithm
from rljax_offline.algorithms.sac.replay import Replay
from rljax_offline.errors import PolicyMismatchError

_STARTS_SAC = ("SAC starts from a Box policy with a tanh-squashed Gaussian actor and Q "
               "networks: awac or crr (actor_tanh_mean=False), cal_ql, cql, iql "
               "(actor_squashed=True), sac")


class SAC(OnlineAlgorithm):
    """Online SAC (see the module docstring). Build with `SACConfig().build()`."""

    started_from: str | None = None

    def __init__(self, config, process=None):
        super().__init__(config, process)
        if self.multi_process:
            raise ConfigError("SACConfig trains in one process (its env runner and replay "
                              "buffer are local); use num_devices for several devices")

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

    # ------------------------------------------------------------------ data

    def make_source(self) -> Replay:
        """SAC's data: the replay buffer the rollouts fill."""
        return Replay(self.config, self.dp)
