"""`Rollouts`: PPO's data source, each iteration's fresh on-policy rollout trained on for
`num_epochs` epochs.

The online facade (`algorithms.online.OnlineAlgorithm.train`, the one loop) samples with the
exploring policy and hands the rollout here; this source:

1. runs the learner pipeline on the chunks with the current params (its GAE piece reads V);
2. standardizes the advantages over the batch and runs `num_epochs` epochs of
   `minibatch_size` updates in one jitted program (`DataParallel.epochs_on_device`);
3. adapts the KL coefficient (RLlib's rule) and returns RLlib's learner metrics.

Recurrent policies: step 1 cuts the chunks into `max_seq_len` sequences; step 2 standardizes
over valid steps, pads the sequence rows to a fixed count (`pad_sequences`) and runs
`train_batch_size_per_learner // minibatch_size` minibatches an epoch of whole sequences, so
one compiled program serves every iteration.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from rljax_offline.algorithms.data_sources import MODULE_ID
from rljax_offline.algorithms.ppo.config import standardize


class Rollouts:
    """PPO's data source (see the module docstring); the online facade's `source`."""

    def __init__(self):
        self._epochs = None  # the compiled epoch program, made on the first update
        self._sequence_slots = 0

    def sample(self, algo: Any):
        """One iteration's rollout: `(episode chunks, [(return, length)] finished)`."""
        # RLlib's cut keeps `episode_lookback_horizon` steps; a recurrent policy needs at
        # least the one whose `state_out` the continuing chunk starts from.
        lookback = max(algo.config.episode_lookback_horizon, 1) if algo.is_stateful else 0
        return algo.sample_steps(algo.rollout_rows, lookback)

    def update(self, algo: Any, chunks: list, steps: int) -> tuple[dict, dict, int]:
        """Trains `algo` on the rollout `chunks` (`steps` env steps); returns its learner
        metrics, the result's other fields and the number of updates."""
        c = algo.config
        params = jax.device_get(algo.state.params)
        cols, cstate, _ = algo.data.columns(chunks, jax.device_get(algo.state.connector_state),
                                            fit=True, params=params)
        n = algo.rollout_rows  # a fixed shape: one compiled epoch program
        num_minibatches = n // c.minibatch_size
        if algo.is_stateful:
            cols = self.pad_sequences(algo, cols)
            cols["advantages"] = standardize(cols["advantages"], cols["loss_mask"])
            minibatch_steps = algo.dp.batch_size * algo.spec.acting.policy.max_seq_len
            trained_env_steps = steps
        else:
            cols = jax.tree_util.tree_map(lambda x: x[:n], cols)
            cols["advantages"] = standardize(cols["advantages"])
            minibatch_steps, trained_env_steps = c.minibatch_size, n
        if self._epochs is None:
            self._epochs = algo.dp.epochs_on_device(
                c.num_epochs, num_minibatches if algo.is_stateful else None)
        algo.state = algo.state._replace(connector_state=algo.dp.put_replicated(cstate))
        algo.state, metrics = self._epochs(algo.state, algo.dp.put_replicated(cols))
        metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
        if c.use_kl_loss:
            adapt_kl_coeff(algo, metrics["mean_kl_loss"])
        num_updates = c.num_epochs * num_minibatches
        trained = num_updates * minibatch_steps
        extra = {k: float(v) for k, v in jax.device_get(algo.state.extra).items()}
        learners = {MODULE_ID: {**metrics, **extra, "num_module_steps_trained": trained,
                                "vf_explained_var": explained_variance(cols)},
                    "__all_modules__": {"num_env_steps_trained": trained_env_steps}}
        return learners, {"fine_tuned_from": algo.fine_tuned_from}, num_updates

    def pad_sequences(self, algo: Any, cols: dict) -> dict:
        """A rollout's sequence rows padded with all-padding sequences (`loss_mask` False,
        zeros) to a fixed count, so one compiled epoch program serves every iteration. The
        count: twice the sequences of `train_batch_size_per_learner` (+ the last step of
        each env) full sequences, plus one per env, which holds while episodes average at
        least `max_seq_len` steps; a rollout of more (many short episodes) raises it to the
        next power of two, one compile more."""
        c = algo.config
        count = len(cols["seq_lens"])
        seq_len = algo.spec.acting.policy.max_seq_len
        envs = c.num_envs_per_env_runner
        base = 2 * -(-(c.train_batch_size_per_learner + envs) // seq_len) + envs
        self._sequence_slots = max(self._sequence_slots, base)
        if count > self._sequence_slots:
            self._sequence_slots = 1 << (count - 1).bit_length()
        extra = self._sequence_slots - count
        return jax.tree_util.tree_map(
            lambda x: np.concatenate([x, np.zeros((extra, *x.shape[1:]), x.dtype)]), cols)

    def checkpoint_files(self) -> dict[str, bytes]:
        """None: a rollout is used once."""
        return {}

    def restore(self, algo: Any, path: str) -> None:
        """Nothing to restore: the next iteration samples a fresh rollout."""

    def stop(self) -> None:
        """Nothing held."""


def adapt_kl_coeff(algo: Any, kl: float) -> None:
    """RLlib's rule: x1.5 when the KL overshoots 2 * kl_target, x0.5 below half of it."""
    extra = jax.device_get(algo.state.extra)
    coeff = float(extra["curr_kl_coeff"])
    if kl > 2.0 * algo.config.kl_target:
        coeff *= 1.5
    elif kl < 0.5 * algo.config.kl_target:
        coeff *= 0.5
    extra = {**extra, "curr_kl_coeff": np.float32(coeff)}
    algo.state = algo.state._replace(extra=algo.dp.put_replicated(extra))


def explained_variance(cols: dict) -> float:
    """RLlib's `vf_explained_var`: 1 - Var(target - V) / Var(target) on the train batch's
    valid steps, with the value predictions the advantages were computed from."""
    valid = np.asarray(cols.get("loss_mask", np.ones(np.shape(cols["value_targets"]))), bool)
    targets = np.asarray(cols["value_targets"])[valid]
    var = np.var(targets)
    if var == 0:
        return float("nan")
    return float(1.0 - np.var(targets - np.asarray(cols["vf_preds"])[valid]) / var)
