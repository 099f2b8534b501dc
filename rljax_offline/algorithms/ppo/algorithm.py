"""`PPO`: the online algorithm of RLlib's offline-data guide (train an expert to record from,
and fine-tune a cloned policy).

Everything around the learner is the offline `Algorithm`'s (spaces, connector pipelines,
acting, evaluation, checkpoints); what differs is where the data comes from. Each `train()`:

1. samples `train_batch_size_per_learner` env steps with the exploring policy from
   `num_envs_per_env_runner` gymnasium vector envs (`EnvRunner.sample_continuing`: episodes
   continue across iterations, as in RLlib's env runners) into `Episode` chunks;
2. runs the learner pipeline on them with the current params (its GAE piece reads V);
3. standardizes the advantages over the batch and runs `num_epochs` epochs of
   `minibatch_size` updates in one jitted program (`DataParallel.epochs_on_device`: a
   `lax.scan` over epochs and minibatches, data-parallel over the selected devices);
4. adapts the KL coefficient and reports RLlib's metrics (`env_runners/episode_return_mean`
   over the last `metrics_num_episodes_for_smoothing` finished episodes, ...).

Recurrent policies: continuing chunks keep one lookback step (its recorded `state_out` is
the next chunk's `state_in`); step 2 cuts the chunks into `max_seq_len` sequences; step 3
standardizes over valid steps, pads the sequence rows to a fixed count (`_pad_sequences`)
and runs `train_batch_size_per_learner // minibatch_size` minibatches an epoch, each of
`minibatch_size / max_seq_len` whole sequences (rounded to the device count) drawn from a
fresh permutation of the rollout's sequences (`epochs_on_device(..., num_minibatches)`), so
one compiled program serves every iteration.

Fine-tuning: with `init_policy_from=<checkpoint>` the policy starts from that checkpoint's
policy weights, and the value network is first fitted to the offline data's returns-to-go
(`value_warmup_updates`). A checkpoint can start PPO when it has a policy network whose action
distribution PPO's own is: categorical (Discrete) or a plain Gaussian (Box) - BC, MARWIL, PPO,
IQL (Discrete, or Box with `actor_squashed=False`). Others are refused with a one-line
`PolicyMismatchError` saying why: Discrete CQL acts greedily in its Q networks (no policy
network); Box CQL's and IQL's default actors are tanh-squashed Gaussians, whose outputs a plain
Gaussian would read as other actions.
"""

from __future__ import annotations

import time

import jax
import numpy as np

from rljax_offline.algorithms import pipelines
from rljax_offline.algorithms.algorithm import MODULE_ID
from rljax_offline.algorithms.config import ConfigError
from rljax_offline.algorithms.fine_tuning import check_same_shapes, load_start
from rljax_offline.algorithms.online import OnlineAlgorithm
from rljax_offline.algorithms.ppo.config import standardize
from rljax_offline.learning.data_parallel import DataParallel
from rljax_offline.learning.init import init_state

_WARMUP_BATCH = 1024


class PPO(OnlineAlgorithm):
    """Online PPO (see the module docstring). Build with `PPOConfig().build()`: the
    `Algorithm` facade as it is (its updates take `minibatch_size` rows, the config's
    `update_batch_size`), with the data sampled from the env; fine-tuning is the explicit step
    `fine_tune_from` that `PPOConfig.build()` takes when `init_policy_from` is set."""

    # Online state, none of it before the first iteration.
    _epochs = None
    _sequence_slots = 0
    warmup_metrics: dict = {}  # replaced, never changed in place
    fine_tuned_from: str | None = None

    # ------------------------------------------------------------------ fine-tuning

    def fine_tune_from(self, path: str) -> None:
        """Policy weights from a checkpoint of any algorithm, then the value warm-up."""
        start = load_start(path, self.spaces, self.spec.acting, "PPO",
                           "PPO starts from a categorical (Discrete) or plain Gaussian (Box) "
                           "policy network: bc, marwil, ppo, iql (Box: actor_squashed=False)")
        policy = start.params["policy"]
        check_same_shapes(path, "policy network", policy,
                          jax.device_get(self.state.params["policy"]),
                          f"model_config {self.config.model_config}")
        params = {**jax.device_get(self.state.params), "policy": policy}
        self.state = self.dp.put_replicated(self.state._replace(params=params))
        self.fine_tuned_from = path
        if self.config.value_warmup_updates:
            self._warm_up_value()

    def _warm_up_value(self) -> None:
        c = self.config
        if c.input_ is None:
            raise ConfigError("value warm-up needs offline data: the checkpoint names none; "
                              "set offline_data(input_=...) or value_warmup_updates=0")
        warm, spaces = pipelines.value_warmup(c, self.spaces)
        spec = c.value_warmup_spec(spaces.observation)
        episodes = self.data.prelearned(list(self.data.episodes(0, shuffle=False)))
        cols, _, _ = self.data.columns(episodes, warm.init(self.spaces), fit=False,
                                       apply=jax.jit(warm.apply), columns=spec.data.columns)
        dp = DataParallel(spec.learning, self.devices, _WARMUP_BATCH, mode=c.update_mode)
        state = init_state(spec.learning, c.seed)
        current = jax.device_get(self.state.params)
        state = state._replace(params={"policy": current["policy"], "value": current["value"]})
        state, metrics = dp.scan_on_device(c.value_warmup_updates)(
            dp.put_replicated(state), dp.put_replicated(cols))
        params = {**jax.device_get(self.state.params),
                  "value": jax.device_get(state.params["value"])}
        self.state = self.dp.put_replicated(self.state._replace(params=params))
        self.warmup_metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}

    # ------------------------------------------------------------------ sampling

    def sample(self):
        """One iteration's rollouts: `(episode chunks, [(return, length)] finished)`."""
        c = self.config
        # RLlib's cut keeps `episode_lookback_horizon` steps; a recurrent policy needs at
        # least the one whose `state_out` the continuing chunk starts from.
        lookback = max(c.episode_lookback_horizon, 1) if self.is_stateful else 0
        return self.sample_steps(self.rollout_rows, lookback)

    def sampled_env_steps(self, chunks: list, finished: list) -> int:
        """Env steps a rollout took: its chunks' steps."""
        return sum(len(ep) for ep in chunks)

    @property
    def rollout_rows(self) -> int:
        """Rows of one iteration's train batch: `train_batch_size_per_learner` env steps."""
        return self.config.train_batch_size_per_learner

    # ------------------------------------------------------------------ training

    def train(self) -> dict:
        t0 = time.perf_counter()
        c = self.config
        chunks, finished = self.sample()
        sample_s = time.perf_counter() - t0
        steps = self.sampled_env_steps(chunks, finished)
        params = jax.device_get(self.state.params)
        cols, cstate, _ = self.data.columns(chunks, jax.device_get(self.state.connector_state),
                                            fit=True, params=params)
        n = self.rollout_rows  # a fixed shape: one compiled epoch program
        num_minibatches = n // c.minibatch_size
        if self.is_stateful:
            cols = self._pad_sequences(cols)
            cols["advantages"] = standardize(cols["advantages"], cols["loss_mask"])
            minibatch_steps = self.dp.batch_size * self.spec.acting.policy.max_seq_len
            trained_env_steps = steps
        else:
            cols = jax.tree_util.tree_map(lambda x: x[:n], cols)
            cols["advantages"] = standardize(cols["advantages"])
            minibatch_steps, trained_env_steps = c.minibatch_size, n
        t_upd = time.perf_counter()
        if self._epochs is None:
            self._epochs = self.dp.epochs_on_device(
                c.num_epochs, num_minibatches if self.is_stateful else None)
        self.state = self.state._replace(connector_state=self.dp.put_replicated(cstate))
        self.state, metrics = self._epochs(self.state, self.dp.put_replicated(cols))
        metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
        if c.use_kl_loss:
            self._adapt_kl_coeff(metrics["mean_kl_loss"])
        update_s = time.perf_counter() - t_upd
        num_updates = c.num_epochs * num_minibatches
        trained = num_updates * minibatch_steps
        extra = {k: float(v) for k, v in jax.device_get(self.state.extra).items()}
        return self._iteration_result(
            t0, steps, finished, sample_s,
            {MODULE_ID: {**metrics, **extra, "num_module_steps_trained": trained,
                         "vf_explained_var": explained_variance(cols)},
             "__all_modules__": {"num_env_steps_trained": trained_env_steps,
                                 "learner_update_timer": update_s / num_updates}},
            fine_tuned_from=self.fine_tuned_from)

    def _pad_sequences(self, cols: dict) -> dict:
        """A rollout's sequence rows padded with all-padding sequences (`loss_mask` False,
        zeros) to a fixed count, so one compiled epoch program serves every iteration. The
        count: twice the sequences of `train_batch_size_per_learner` (+ the last step of
        each env) full sequences, plus one per env, which holds while episodes average at
        least `max_seq_len` steps; a rollout of more (many short episodes) raises it to the
        next power of two, one compile more."""
        c = self.config
        count = len(cols["seq_lens"])
        seq_len = self.spec.acting.policy.max_seq_len
        envs = c.num_envs_per_env_runner
        base = 2 * -(-(c.train_batch_size_per_learner + envs) // seq_len) + envs
        self._sequence_slots = max(self._sequence_slots, base)
        if count > self._sequence_slots:
            self._sequence_slots = 1 << (count - 1).bit_length()
        extra = self._sequence_slots - count
        return jax.tree_util.tree_map(
            lambda x: np.concatenate([x, np.zeros((extra, *x.shape[1:]), x.dtype)]), cols)

    def _adapt_kl_coeff(self, kl: float) -> None:
        """RLlib's rule: x1.5 when the KL overshoots 2 * kl_target, x0.5 below half of it."""
        extra = jax.device_get(self.state.extra)
        coeff = float(extra["curr_kl_coeff"])
        if kl > 2.0 * self.config.kl_target:
            coeff *= 1.5
        elif kl < 0.5 * self.config.kl_target:
            coeff *= 0.5
        extra = {**extra, "curr_kl_coeff": np.float32(coeff)}
        self.state = self.state._replace(extra=self.dp.put_replicated(extra))


def explained_variance(cols: dict) -> float:
    """RLlib's `vf_explained_var`: 1 - Var(target - V) / Var(target) on the train batch's
    valid steps, with the value predictions the advantages were computed from."""
    valid = np.asarray(cols.get("loss_mask", np.ones(np.shape(cols["value_targets"]))), bool)
    targets = np.asarray(cols["value_targets"])[valid]
    var = np.var(targets)
    if var == 0:
        return float("nan")
    return float(1.0 - np.var(targets - np.asarray(cols["vf_preds"])[valid]) / var)
