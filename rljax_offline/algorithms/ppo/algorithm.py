"""`PPO`: the online algorithm of RLlib's offline-data guide (train an expert to record from,
and fine-tune a cloned policy).

Everything around the learner is the online facade's (`algorithms.online`: spaces,
connector pipelines, acting, evaluation, checkpoints, the one training loop); what differs is
where the data comes from, PPO's data source `ppo.rollouts.Rollouts`: each iteration samples
`train_batch_size_per_learner` env steps with the exploring policy from
`num_envs_per_env_runner` gymnasium vector envs (`EnvRunner.sample_continuing`: episodes
continue across iterations, as in RLlib's env runners; a recurrent policy's chunks keep one
lookback step, whose recorded `state_out` is the next chunk's `state_in`), and the source runs
the learner pipeline on them (GAE), `num_epochs` epochs of `minibatch_size` updates in one
jitted program and the KL coefficient's adaptation. The result has RLlib's metrics
(`env_runners/episode_return_mean` over the last `metrics_num_episodes_for_smoothing`
finished episodes, ...).

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

import jax

from rljax_offline.algorithms import pipelines
from rljax_offline.algorithms.config import ConfigError
from rljax_offline.algorithms.fine_tuning import check_same_shapes, load_start
from rljax_offline.algorithms.online import OnlineAlgorithm
from rljax_offline.algorithms.ppo.rollouts import Rollouts
from rljax_offline.learning.data_parallel import DataParallel
from rljax_offline.learning.init import init_state

_WARMUP_BATCH = 1024


class PPO(OnlineAlgorithm):
    """Online PPO (see the module docstring). Build with `PPOConfig().build()`: the
    `Algorithm` facade as it is (its updates take `minibatch_size` rows, the config's
    `update_batch_size`), with its data source `Rollouts`; fine-tuning is the explicit step
    `fine_tune_from` that `PPOConfig.build()` takes when `init_policy_from` is set."""

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

    # ------------------------------------------------------------------ data

    def make_source(self) -> Rollouts:
        """PPO's data: a fresh rollout each iteration, `num_epochs` epochs on it."""
        return Rollouts()

    @property
    def rollout_rows(self) -> int:
        """Rows of one iteration's train batch: `train_batch_size_per_learner` env steps."""
        return self.config.train_batch_size_per_learner
