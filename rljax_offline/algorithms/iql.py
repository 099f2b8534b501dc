"""IQL: implicit Q-learning (Kostrikov et al. 2021), with RLlib's parameter names; the paper's
defaults where RLlib's do not learn (below).

IQL never queries Q on actions outside the data. Three losses, each on data actions only:

* value (`value`): expectile regression of `V(s)` onto `min_k Q_target_k(s, a)`; with
  `expectile > 0.5`, V approaches the best in-data action's value rather than the average;
* critic (`qf`): `Q_k(s, a)` regresses `r + gamma * (1 - terminated) * V(s')` (each twin with
  weight 1/2 when `twin_q`, as RLlib);
* actor (`policy`): advantage-weighted regression,
  `-min(exp(beta * (Q_target(s, a) - V(s))), 100) * logp(a | s)`.

Box actions use the tanh-squashed Gaussian actor of RLlib's IQL module (`actor_squashed=False`
gives RLlib's plain Gaussian; `actor_tanh_mean=True` the paper's and d3rlpy's actor, a Gaussian
around `tanh(mean)` in the unit box with a state-independent std); Discrete actions a
categorical policy over the Q networks' per-action outputs. Target Q networks follow `tau` every
`target_network_update_freq` updates.

Defaults: the paper's (and d3rlpy's, CORL's) `beta=3.0`, `expectile=0.7`, `tau=0.005`, not
RLlib's `beta=0.1`, `expectile=0.8`, `tau=1.0`: with `tau=1.0` every update the target Q is the
online Q (no target network), and `beta=0.1` leaves the advantage weights near 1 (the actor
near BC). On the mixed Pendulum set (`pendulum-mixed`, 5,000 updates, seed 0, level = mean of
the last three of five evaluations) RLlib's defaults reach -1,242, `tau=0.005` alone -897,
`beta=3.0` alone -1,297, and the paper's three -270 (the README's d3rlpy section has the
20k-update runs). RLlib's values are one `.training(beta=0.1, expectile=0.8, tau=1.0)` away.

Box actions outside the space's bounds (RLlib records a Gaussian policy's unclipped samples):
with the tanh-squashed actor (whose log-probability is -inf outside the bounds) the learner
pipeline clips them just inside the bounds (`clip_actions_inside_bounds`), for the critic too,
since the env ran the clipped action; the plain Gaussian actor (`actor_squashed=False`) learns
them as they are.

Recurrent (`use_lstm` / `use_gru`): actor, Q networks and value network are all recurrent with
the same model config, each its own encoder and cell. The actor unrolls from the batch's
`state_in`, Q, its target and V from their initial state at each sequence; `V(s')` in the
critic's target is the next step of V's unroll over the sequence (`recurrent.step_outputs`),
not an unroll from the batch's `next_state_in` (RLlib's; see the README).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from rljax_offline import spaces as sp
from rljax_offline.algorithms.config import AlgorithmConfig, ConfigError
from rljax_offline.algorithms.options import (
    boolean,
    non_negative_int,
    open_unit_interval,
    option,
    optional,
    positive_float,
    positive_int,
    unit_interval_open_left,
)
from rljax_offline.connectors.learner import clip_actions_inside_bounds
from rljax_offline.learning.losses import expectile_loss, not_terminal, take_action
from rljax_offline.learning.optim import make_optimizer
from rljax_offline.learning.spec import (
    ActingSpec,
    AlgorithmSpec,
    DataSpec,
    LearningSpec,
    Loss,
)
from rljax_offline.models.actor_and_q import actor, check_bounded, q_ensemble, tanh_mean_actor
from rljax_offline.models.networks import value_network
from rljax_offline.models.recurrent import step_rows

MAX_ADVANTAGE_WEIGHT = 100.0


@dataclasses.dataclass(frozen=True)
class IQLConfig(AlgorithmConfig):
    """IQL with RLlib's names (RLlib's `IQLConfig`), the paper's defaults (module docstring).

    Example:
        >>> from rljax_offline import IQLConfig
        >>> algo = (IQLConfig().environment("CartPole-v1")
        ...         .offline_data(input_="data/cartpole_mixed")
        ...         .training(beta=3.0, expectile=0.8)).build()
        >>> result = algo.train()
    """

    algo_name = "iql"

    lr: float | None = option(None, "training", optional(positive_float),
                              "unused (RLlib sets it None): IQL has actor_lr, critic_lr, value_lr")
    train_batch_size_per_learner: int = option(256, "training", positive_int,
                                               "rows of one update, over all devices")
    beta: float = option(3.0, "training", positive_float,
                         "inverse temperature of the advantage weights exp(beta * A) "
                         "(RLlib's default: 0.1)")
    expectile: float = option(0.7, "training", open_unit_interval,
                              "expectile of the value regression (0.5: the mean; RLlib's "
                              "default: 0.8)")
    actor_lr: float = option(3e-4, "training", positive_float, "learning rate of the actor")
    critic_lr: float = option(3e-4, "training", positive_float,
                              "learning rate of the Q networks")
    value_lr: float = option(3e-4, "training", positive_float,
                             "learning rate of the value network")
    twin_q: bool = option(True, "training", boolean, "two Q networks, their minimum in targets")
    tau: float = option(5e-3, "training", unit_interval_open_left,
                        "Polyak weight of the target Q update (1: copy; RLlib's default: 1.0)")
    target_network_update_freq: int = option(0, "training", non_negative_int,
                                             "updates between target updates (0: every one)")
    actor_squashed: bool = option(True, "training", boolean,
                                  "Box: tanh-squashed Gaussian actor (RLlib); False: plain "
                                  "Gaussian")
    actor_tanh_mean: bool = option(False, "training", boolean,
                                   "Box: the paper's and d3rlpy's actor instead, a Gaussian "
                                   "around tanh(mean) in the unit box with a state-independent "
                                   "std in [e^-5, e^2] (overrides actor_squashed)")

    def validate(self) -> None:
        super().validate()
        if self.lr is not None:
            raise ConfigError("IQLConfig: lr is not used; set actor_lr, critic_lr and value_lr "
                              f"(got lr={self.lr!r})")

    def check_spaces(self, obs_spec, act_spec) -> None:
        super().check_spaces(obs_spec, act_spec)
        if isinstance(act_spec, sp.BoxSpec) and (self.actor_squashed or self.actor_tanh_mean):
            check_bounded(act_spec, "IQLConfig with actor_squashed or actor_tanh_mean")

    def make_spec(self, obs_spec, act_spec) -> AlgorithmSpec:
        self.check_spaces(obs_spec, act_spec)
        discrete = isinstance(act_spec, sp.DiscreteSpec)
        tanh_mean = self.actor_tanh_mean and not discrete
        policy = (tanh_mean_actor(obs_spec, act_spec, self.model_config) if tanh_mean else
                  actor(obs_spec, act_spec, self.model_config, squashed=self.actor_squashed))
        q = q_ensemble(obs_spec, act_spec, self.model_config, self.twin_q)
        value = value_network(obs_spec, self.model_config)
        gamma, expectile, beta = self.gamma, self.expectile, self.beta
        twin_weight = 0.5 if self.twin_q else 1.0

        def q_data(q_params, batch):
            feats, actions = q.steps(q_params, batch)[0], step_rows(batch, "actions")
            if discrete:
                return take_action(q.head(q_params, feats), actions)
            return q.head(q_params, feats, actions)

        def values(params, batch, with_next=False):
            feats, next_feats = value.steps(params["value"], batch, with_next=with_next)
            return value.head(params["value"], next_feats if with_next else feats)

        def target_q(params, batch):
            return jax.lax.stop_gradient(jnp.min(q_data(params["target_q"], batch), axis=0))

        def init(rng):
            k1, k2, k3 = jax.random.split(rng, 3)
            return {"policy": policy.init(k1), "q": q.init(k2), "value": value.init(k3)}

        def value_loss(params, batch, rng, axis):
            v = values(params, batch)
            loss = expectile_loss(target_q(params, batch) - v, expectile)
            return loss, {"vf_loss": loss, "vf_mean": v}

        def actor_loss(params, batch, rng, axis):
            adv = target_q(params, batch) - jax.lax.stop_gradient(values(params, batch))
            weight = jnp.minimum(jnp.exp(beta * adv), MAX_ADVANTAGE_WEIGHT)
            logp = policy.dist.logp(policy.steps(params["policy"], batch)[0],
                                    step_rows(batch, "actions"))
            loss = -weight * logp
            return loss, {"policy_loss": loss, "advantage_mean": adv,
                          "advantage_weight_mean": weight}

        def critic_loss(params, batch, rng, axis):
            next_v = values(params, batch, with_next=True)
            y = jax.lax.stop_gradient(step_rows(batch, "rewards")
                                      + gamma * not_terminal(batch) * next_v)
            qs = q_data(params["q"], batch)
            loss = twin_weight * jnp.sum((qs - y) ** 2, axis=0)
            return loss, {"qf_loss": loss, "qf_mean": qs.mean(0)}

        learning = LearningSpec(
            init=init,
            losses=(Loss("value", ("value",), value_loss,
                         make_optimizer(self.value_lr, self.grad_clip)),
                    Loss("policy", ("policy",), actor_loss,
                         make_optimizer(self.actor_lr, self.grad_clip)),
                    Loss("qf", ("q",), critic_loss,
                         make_optimizer(self.critic_lr, self.grad_clip))),
            targets={"target_q": "q"}, tau=self.tau,
            target_update_period=max(1, self.target_network_update_freq))
        acting = ActingSpec(act=lambda params, obs: policy.apply(params["policy"], obs),
                            dist=policy.dist, policy=policy)
        return AlgorithmSpec(learning, acting, DataSpec(
            columns=("obs", "actions", "rewards", "new_obs", "terminateds"),
            learner_connector=((clip_actions_inside_bounds(margin=0.0),) if tanh_mean else
                               (clip_actions_inside_bounds(),) if self.actor_squashed
                               else ())))
