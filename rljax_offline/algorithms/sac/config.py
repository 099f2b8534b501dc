"""SAC (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications"), as RLlib has it.

The learner, per example, in this order (a later loss sees the params the earlier produced):

* critic (`qf`): twin Q networks regress the soft n-step target
  `R + gamma**n_step * (1 - terminated) * (min_k Q_target_k(s', a') - alpha * log pi(a'|s'))`,
  `a' ~ pi(.|s')` (`learning.losses.soft_td_target`), with `R` the discounted sum of the
  `n_step` rewards and `s'` the observation after them (`n_step_returns`, a learner piece);
* actor (`policy`): `alpha * log pi(a|s) - min_k Q_k(s, a)`, `a ~ pi(.|s)` reparameterised
  (`learning.losses.soft_actor_loss`);
* temperature (`alpha`): `-log_alpha * (log pi(a|s) + target_entropy)`, which holds the
  policy's entropy near `target_entropy` ("auto": `-dim(A)`; `learning.losses.temperature_loss`).

Targets follow with Polyak weight `tau` every `target_network_update_freq` updates (0: every
update). The actor is a tanh-squashed Gaussian scaled to the Box bounds (`models.actor_and_q`,
RLlib's and CQL's), so its samples are always valid env actions. CQL (`algorithms.cql`) is this
learner plus its conservative term and shares these loss functions.

Discrete actions (Christodoulou 2019, RLlib's discrete SAC): a categorical actor and Q
networks with one output per action; the expectations over `a'` and `a` are exact sums over
the actions (`sum_a pi(a|s) (...)`) instead of one draw, and "auto" targets an entropy of
`0.98 * log |A|` (RLlib's).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from rljax_offline import spaces as sp
from rljax_offline.algorithms.config import AlgorithmConfig, ConfigError
from rljax_offline.algorithms.cql import auto_or_number, sample_per_example
from rljax_offline.algorithms.fine_tuning import build_started
from rljax_offline.algorithms.options import (
    boolean,
    dict_or_none,
    non_negative_int,
    option,
    optional,
    positive_float,
    positive_int,
    unit_interval_open_left,
)
from rljax_offline.algorithms.replay_options import ReplayOptions
from rljax_offline.connectors.core import Connector, stateless
from rljax_offline.learning import checkpoint as ckpt
from rljax_offline.learning.losses import (
    soft_actor_loss,
    soft_td_target,
    take_action,
    target_entropy,
    temperature_loss,
)
from rljax_offline.learning.optim import make_optimizer
from rljax_offline.learning.spec import ActingSpec, AlgorithmSpec, DataSpec, LearningSpec, Loss
from rljax_offline.models.actor_and_q import actor, check_bounded, q_ensemble
from rljax_offline.models.policy import is_recurrent

SAC_COLUMNS = ("obs", "actions", "rewards", "new_obs", "terminateds", "n_step")


def n_step_returns(n_step: int, gamma: float) -> Connector:
    """Learner piece: each step's `rewards` become the discounted sum of the next `k =
    min(n_step, steps left in the chunk)` rewards, `new_obs` and `terminateds` those of the
    k-th step, and `n_step` is k (the target discounts by `gamma**n_step`). A chunk cut
    before its episode ended bootstraps its last steps from fewer rewards (k < n_step), as
    the data it has allows. `n_step=1` leaves the columns as they are (and adds `n_step`=1)."""
    n = int(n_step)

    def apply(episodes, batch, ctx):
        B, T = episodes.batch_size, episodes.max_len
        t = jnp.arange(T)[None, :]
        k = jnp.clip(episodes.lengths[:, None] - t, 1, n)  # [B, T]
        rewards = batch["rewards"].reshape(B, T)
        padded = jnp.concatenate([rewards, jnp.zeros((B, n), rewards.dtype)], axis=1)
        total = jnp.zeros_like(rewards)
        for i in range(n):
            total = total + jnp.where(i < k, gamma ** i * padded[:, i:i + T], 0.0)
        last = (jnp.arange(B)[:, None] * T + jnp.minimum(t + k - 1, T - 1)).reshape(-1)
        mask = batch["loss_mask"].reshape(B, T)
        out = {"rewards": jnp.where(mask, total, 0.0).reshape(-1).astype(rewards.dtype),
               "new_obs": jax.tree_util.tree_map(lambda x: jnp.take(x, last, axis=0),
                                                 batch["new_obs"]),
               "terminateds": jnp.take(batch["terminateds"], last, axis=0),
               "n_step": k.reshape(-1).astype(jnp.int32)}
        return episodes, {**batch, **out}

    return stateless(apply)


@dataclasses.dataclass(frozen=True)
class SACConfig(ReplayOptions, AlgorithmConfig):
    """SAC with RLlib's names and defaults (RLlib's `SACConfig`; see the module docstring).

    Each `train()` samples `min_sample_timesteps_per_iteration` env steps with the exploring
    policy (episodes continue across iterations), adds them to the on-device replay buffer
    and, once `num_steps_sampled_before_learning_starts` steps were sampled, runs the
    updates `training_intensity` asks for in one jitted `lax.scan`.

    Example:
        >>> from rljax_offline import SACConfig
        >>> algo = (SACConfig().environment("Pendulum-v1")
        ...         .training(num_steps_sampled_before_learning_starts=1000)).build()
        >>> result = algo.train()
    """

    algorithm_class = "rljax_offline.algorithms.sac.algorithm:SAC"
    algo_name = "sac"
    trains_online = True

    lr: float | None = option(None, "training", optional(positive_float),
                              "unused (RLlib sets it None): SAC has actor_lr, critic_lr, alpha_lr")
    train_batch_size_per_learner: int = option(256, "training", positive_int,
                                               "rows of one update, over all devices")
    actor_lr: float = option(3e-5, "training", positive_float,
                             "learning rate of the actor (RLlib's: a tenth of critic_lr)")
    critic_lr: float = option(3e-4, "training", positive_float,
                              "learning rate of the Q networks")
    alpha_lr: float = option(3e-4, "training", positive_float,
                             "learning rate of the entropy coefficient")
    twin_q: bool = option(True, "training", boolean, "two Q networks, their minimum in targets")
    tau: float = option(5e-3, "training", unit_interval_open_left,
                        "Polyak weight of the target Q update")
    initial_alpha: float = option(1.0, "training", positive_float, "initial entropy coefficient")
    target_entropy: float | str = option("auto", "training", auto_or_number,
                                         "entropy target; 'auto': -dim(actions) (Box), "
                                         "0.98 log n (Discrete(n))")
    n_step: int = option(1, "training", positive_int, "steps of the TD target's rewards")
    target_network_update_freq: int = option(0, "training", non_negative_int,
                                             "updates between target updates (0: every one)")
    init_from: str | None = option(
        None, "training", None, "a checkpoint of CQL or IQL (Box, tanh-squashed actor) whose "
        "actor, Q networks and targets SAC starts from (offline-to-online fine-tuning)")
    evaluation_interval: int = option(0, "evaluation", non_negative_int,
                                      "evaluate every N iterations (0: never; the sampling "
                                      "episodes are reported under env_runners)")
    model_config: dict = option({"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"},
                                "rl_module", dict_or_none, "RLlib's model-config keys")

    def validate(self) -> None:
        super().validate()
        name = type(self).__name__
        if self.lr is not None:
            raise ConfigError(f"{name}: lr is not used; set actor_lr, critic_lr and alpha_lr "
                              f"(got lr={self.lr!r})")
        if is_recurrent(self.model_config or {}):
            raise ConfigError(f"{name} has no recurrent form: drop use_lstm / use_gru")
        if self.init_from is not None and not (isinstance(self.init_from, str)
                                               and self.init_from):
            raise ConfigError(f"{name}: init_from must be None or a path, got "
                              f"{self.init_from!r}")

    def check_spaces(self, obs_spec, act_spec) -> None:
        super().check_spaces(obs_spec, act_spec)
        if isinstance(act_spec, sp.BoxSpec):
            check_bounded(act_spec, "SACConfig (a tanh-squashed Gaussian actor)")

    @property
    def updates_per_iteration(self) -> int:
        """Updates one `train()` runs once learning started (`replay_updates_per_iteration`)."""
        return self.replay_updates_per_iteration

    def make_spec(self, obs_spec, act_spec) -> AlgorithmSpec:
        self.check_spaces(obs_spec, act_spec)
        policy = actor(obs_spec, act_spec, self.model_config)
        q = q_ensemble(obs_spec, act_spec, self.model_config, self.twin_q)
        discrete = isinstance(act_spec, sp.DiscreteSpec)
        gamma, entropy = self.gamma, target_entropy(self.target_entropy, act_spec)
        log_alpha0 = math.log(self.initial_alpha)

        def init(rng):
            k1, k2 = jax.random.split(rng)
            return {"policy": policy.init(k1), "q": q.init(k2),
                    "log_alpha": jnp.asarray(log_alpha0, jnp.float32)}

        def pi_at(params, obs, rng):
            """Box: an action drawn from pi(.|s) (reparameterised) and its logp;
            Discrete: (None, log pi(.|s) [N, n])."""
            inputs = policy.apply(params["policy"], obs)
            if discrete:
                return None, jax.nn.log_softmax(inputs, axis=-1)
            return sample_per_example(policy.dist, inputs, rng)

        def soft_value(params, q_name, obs, rng):
            """`(min_k Q(s, a), logp(a|s))` for `a ~ pi(.|s)`: one draw (Box) or the exact
            expectation over the actions (Discrete, as discrete SAC has it)."""
            a, logp = pi_at(params, obs, rng)
            if not discrete:
                return jnp.min(q.apply(params[q_name], obs, a), axis=0), logp
            pi = jnp.exp(logp)
            q_all = jnp.min(q.apply(params[q_name], obs), axis=0)  # [N, n]
            return jnp.sum(pi * q_all, axis=-1), jnp.sum(pi * logp, axis=-1)

        def critic_loss(params, batch, rng, axis):
            next_q, next_logp = soft_value(params, "target_q", batch["new_obs"], rng)
            y = soft_td_target(batch, next_q, next_logp, jnp.exp(params["log_alpha"]), gamma)
            qs = (take_action(q.apply(params["q"], batch["obs"]), batch["actions"]) if discrete
                  else q.apply(params["q"], batch["obs"], batch["actions"]))  # [k, N]
            loss = jnp.sum((qs - y) ** 2, axis=0)
            return loss, {"qf_loss": loss, "qf_mean": qs.mean(0), "td_target_mean": y}

        def actor_loss(params, batch, rng, axis):
            q_pi, logp = soft_value(params, "q", batch["obs"], rng)
            loss = soft_actor_loss(jnp.exp(params["log_alpha"]), logp, q_pi)
            return loss, {"policy_loss": loss, "logp": logp}

        def alpha_loss(params, batch, rng, axis):
            _, logp = pi_at(params, batch["obs"], rng)
            if discrete:
                logp = jnp.sum(jnp.exp(logp) * logp, axis=-1)
            loss = temperature_loss(params["log_alpha"], logp, entropy)
            return loss, {"alpha_loss": loss, "alpha_value": jnp.exp(params["log_alpha"])}

        learning = LearningSpec(
            init=init,
            losses=(Loss("qf", ("q",), critic_loss, make_optimizer(self.critic_lr,
                                                                     self.grad_clip)),
                    Loss("policy", ("policy",), actor_loss, make_optimizer(self.actor_lr,
                                                                             self.grad_clip)),
                    Loss("alpha", ("log_alpha",), alpha_loss,
                         make_optimizer(self.alpha_lr))),
            targets={"target_q": "q"}, tau=self.tau,
            target_update_period=max(1, self.target_network_update_freq))
        acting = ActingSpec(act=lambda params, obs: policy.apply(params["policy"], obs),
                            dist=policy.dist, policy=policy)
        return AlgorithmSpec(learning, acting, DataSpec(
            columns=SAC_COLUMNS, learner_connector=(n_step_returns(self.n_step, gamma),)))

    def build(self):
        """The online `SAC` algorithm; with `init_from`, started from that checkpoint's actor
        and Q networks (`SAC.start_from`), taking its `model_config` (its weights fix the
        architecture; `twin_q` stays this config's, checked). The built algorithm's config
        names no checkpoint: its own checkpoints hold the started-from weights."""
        if self.init_from is None:
            return AlgorithmConfig.build(self)
        saved = ckpt.load_meta(self.init_from).get("config", {})
        return build_started(self, self.init_from,
                             model_config=saved.get("model_config", self.model_config))
