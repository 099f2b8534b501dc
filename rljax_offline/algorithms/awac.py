"""AWAC (Nair et al. 2020, "AWAC: Accelerating Online Reinforcement Learning with Offline
Datasets"): an actor-critic whose actor is advantage-weighted regression onto the data's
actions, so it never needs the behavior policy's density, and whose critic is an ordinary
off-policy Q function (online fine-tuning continues the same way).

* critic (`critic`): the ensemble regresses `y = r + gamma * (1 - terminated) * min_k
  Q'_k(s', a')`, `a' ~ pi(.|s')`;
* actor (`actor`): `-w(s, a) * log pi(a|s)` with `A(s, a) = min_k Q_k(s, a) - V(s)`,
  `V(s) = mean_{j <= n_action_samples} min_k Q_k(s, a_j)`, `a_j ~ pi(.|s)`, and
  `w = N * softmax_batch(A / lam)`: the exponential weights `exp(A / lam)` normalized over the
  global batch (all devices' rows, masked ones left out) to mean 1, held constant;
* the target Q networks follow with Polyak weight `tau` every update.

Defaults are d3rlpy 2.8's `AWACConfig` under its names (RLlib has no AWAC): `lam=1.0`,
`n_action_samples=1`, `n_critics=2`, learning rates 3e-4, batch 1024, `gamma=0.99`, `tau=0.005`,
256-256 ReLU networks from PyTorch's `nn.Linear` draw (d3rlpy's). Two differences from
d3rlpy's code: the actor is the tanh-squashed Gaussian that CQL, IQL and SAC share (d3rlpy's is
a Gaussian around a tanh mean with a state-independent log-std in [-6, 0]), so an AWAC
checkpoint starts SAC's online fine-tuning (`SACConfig.training(init_policy_from=...)`);
and the TD target has no entropy term (the paper's; d3rlpy's AWAC inherits SAC's target with
its temperature fixed at 1). The data's actions are clipped just inside the bounds, where the
squashed Gaussian has a density. Box actions with finite bounds only; no recurrent form.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

from rljax_offline.algorithms.actor_critic_base import (
    Q_COLUMNS,
    ActorCriticBaseConfig,
    check_squashed_box,
)
from rljax_offline.algorithms.cql import repeat_rows, sample_per_example, split_keys
from rljax_offline.algorithms.options import (
    option,
    optional,
    positive_float,
    positive_int,
)
from rljax_offline.connectors.learner import clip_actions_inside_bounds
from rljax_offline.learning.losses import batch_softmax_weights, not_terminal
from rljax_offline.learning.optim import make_optimizer
from rljax_offline.learning.spec import ActingSpec, AlgorithmSpec, DataSpec, LearningSpec, Loss
from rljax_offline.models.actor_and_q import actor
from rljax_offline.models.networks import Network, continuous_q_network, ensemble
from rljax_offline.models.policy import Policy


def policy_values(policy: Policy, q: Network, params: dict, obs, keys, n: int,
                  reduce: Callable, over_critics: Callable) -> jax.Array:
    """`V(s)` estimated from `n` actions of the current policy per state: `reduce` (mean or
    max over the samples) of `over_critics` (min or mean over the ensemble) of Q; `[N]`,
    held constant."""
    rows = keys.shape[0]
    inputs = policy.apply(params["policy"], obs)
    actions, _ = sample_per_example(policy.dist, repeat_rows(inputs, n),
                                    split_keys(keys, n).reshape(-1, 2))
    values = over_critics(q.apply(params["q"], repeat_rows(obs, n), actions), axis=0)
    return jax.lax.stop_gradient(reduce(values.reshape(rows, n), axis=-1))


@dataclasses.dataclass(frozen=True)
class AWACConfig(ActorCriticBaseConfig):
    """AWAC with d3rlpy's names and defaults (see the module docstring).

    Example:
        >>> from rljax_offline import AWACConfig
        >>> algo = (AWACConfig().environment("Pendulum-v1")
        ...         .offline_data(input_="data/pendulum_mixed")
        ...         .training(lam=0.3, num_updates_per_iteration=20)).build()
        >>> result = algo.train()
    """

    algo_name = "awac"

    lr: float | None = option(None, "training", optional(positive_float),
                              "unused: AWAC has actor_lr and critic_lr")
    train_batch_size_per_learner: int = option(1024, "training", positive_int,
                                               "rows of one update, over all devices")
    actor_lr: float = option(3e-4, "training", positive_float, "learning rate of the actor")
    critic_lr: float = option(3e-4, "training", positive_float,
                              "learning rate of the Q networks")
    lam: float = option(1.0, "training", positive_float,
                        "temperature of the advantage weights softmax(A / lam)")
    n_action_samples: int = option(1, "training", positive_int,
                                   "policy actions per state that estimate V(s)")
    n_critics: int = option(2, "training", positive_int,
                            "Q networks of the ensemble, their minimum in targets")

    def check_spaces(self, obs_spec, act_spec) -> None:
        check_squashed_box(self, act_spec)

    def make_spec(self, obs_spec, act_spec) -> AlgorithmSpec:
        self.check_spaces(obs_spec, act_spec)
        policy = actor(obs_spec, act_spec, self.model_config)
        q = ensemble(continuous_q_network(obs_spec, act_spec, self.model_config),
                     self.n_critics)
        gamma, lam, n = self.gamma, self.lam, self.n_action_samples

        def init(rng):
            k1, k2 = jax.random.split(rng)
            return {"policy": policy.init(k1), "q": q.init(k2)}

        def critic_loss(params, batch, rng, axis):
            next_a, _ = sample_per_example(
                policy.dist, policy.apply(params["policy"], batch["new_obs"]), rng)
            next_q = jnp.min(q.apply(params["target_q"], batch["new_obs"], next_a), axis=0)
            y = jax.lax.stop_gradient(batch["rewards"] + gamma * not_terminal(batch) * next_q)
            qs = q.apply(params["q"], batch["obs"], batch["actions"])
            loss = jnp.sum((qs - y) ** 2, axis=0)
            return loss, {"qf_loss": loss, "qf_mean": qs.mean(0), "td_target_mean": y}

        def actor_loss(params, batch, rng, axis):
            q_data = jnp.min(q.apply(params["q"], batch["obs"], batch["actions"]), axis=0)
            v = policy_values(policy, q, params, batch["obs"], rng, n, jnp.mean, jnp.min)
            adv = jax.lax.stop_gradient(q_data) - v
            weight = batch_softmax_weights(adv / lam, batch["loss_mask"], axis)
            logp = policy.dist.logp(policy.apply(params["policy"], batch["obs"]),
                                    batch["actions"])
            loss = -weight * logp
            return loss, {"policy_loss": loss, "advantage_mean": adv,
                          "advantage_weight_max": axis.max(weight, batch["loss_mask"]),
                          "logp": logp}

        learning = LearningSpec(
            init=init,
            losses=(Loss("critic", ("q",), critic_loss,
                         make_optimizer(self.critic_lr, self.grad_clip)),
                    Loss("actor", ("policy",), actor_loss,
                         make_optimizer(self.actor_lr, self.grad_clip))),
            targets={"target_q": "q"}, tau=self.tau)
        acting = ActingSpec(act=lambda params, obs: policy.apply(params["policy"], obs),
                            dist=policy.dist, policy=policy)
        return AlgorithmSpec(learning, acting, DataSpec(
            columns=Q_COLUMNS, learner_connector=(clip_actions_inside_bounds(),)))
