"""EDAC (An et al. 2021, "Uncertainty-Based Offline Reinforcement Learning with Diversified
Q-Ensemble"), and SAC-N as its `eta=0` case: SAC with an ensemble of `num_critics` Q networks
whose minimum is pessimistic where the ensemble disagrees (actions outside the data), and a
term that makes the critics' action-gradients disagree, so fewer critics suffice.

* critic (`critic`): each of the N critics regresses SAC's soft target
  `y = r + gamma * (1 - terminated) * (min_j Q'_j(s', a') - alpha * log pi(a'|s'))`,
  `a' ~ pi(.|s')`, plus `eta * ES(s, a)` with the diversity term
  `ES = 1 / (N - 1) * sum_{i != j} <g_i, g_j>`, `g_i = grad_a Q_i(s, a) / |grad_a Q_i(s, a)|`
  at the data's action (in the unit box); `eta=0` leaves it out (SAC-N);
* actor (`actor`): `alpha * log pi(a|s) - min_j Q_j(s, a)`, `a ~ pi(.|s)` reparameterised;
* temperature (`alpha`): SAC's, towards the entropy target `-dim(actions)`;
* the target Q networks follow with Polyak weight `tau` every update.

Defaults are CORL's `edac.py` (neither RLlib nor d3rlpy has EDAC), under CORL's names for
what is EDAC's own (`num_critics=10`, `eta=1.0`) and RLlib's SAC names for the rest:
learning rates 3e-4 (`actor_lr`, `critic_lr`, `alpha_lr`), batch 256, `gamma=0.99`,
`tau=0.005`, initial temperature 1, three hidden layers of 256 (CORL's actor and critics)
from PyTorch's draw (CORL initializes the output layers differently). The actor is the
tanh-squashed Gaussian that SAC and CQL share, so an EDAC checkpoint with `num_critics=2`
starts SAC's online fine-tuning. Box actions with finite bounds only; no recurrent form.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from rljax_offline.algorithms.actor_critic_base import ActorCriticBaseConfig, check_squashed_box
from rljax_offline.algorithms.actor_critic_parts import (
    critic_and_actor,
    sampled_next_q,
    squashed_actor_spec,
    td_regression,
)
from rljax_offline.algorithms.cql import sample_per_example
from rljax_offline.algorithms.options import (
    dict_or_none,
    non_negative_float,
    option,
    optional,
    positive_float,
    positive_int,
)
from rljax_offline.learning.losses import (
    soft_actor_loss,
    soft_td_target,
    target_entropy,
    temperature_loss,
)
from rljax_offline.learning.optim import make_optimizer
from rljax_offline.learning.spec import AlgorithmSpec, LearningSpec, Loss
from rljax_offline.models.actor_and_q import actor
from rljax_offline.models.distributions import action_scaler
from rljax_offline.models.initializers import TORCH_DEFAULT
from rljax_offline.models.networks import Network, continuous_q_network, ensemble

GRAD_NORM_EPS = 1e-10


def diversity(q: Network, q_params, obs, unit_actions, from_unit, shape) -> jax.Array:
    """EDAC's ensemble-similarity term per example `[N]`: the summed pairwise cosine
    similarities of the critics' gradients w.r.t. the (unit-box) action, over `N - 1`."""

    def member_gradient(p):  # one critic's d Q / d a, per row [N, d]
        one = jax.tree_util.tree_map(lambda x: x[None], p)  # an ensemble of that critic alone

        def q_sum(u):  # the sum over the batch: d/du gives each row's gradient
            return jnp.sum(q.apply(one, obs, from_unit(u).reshape(u.shape[0], *shape)))

        return jax.grad(q_sum)(unit_actions)

    # one backward pass per critic: `jacrev` over the ensemble's k outputs backpropagates
    # each one-hot cotangent through all k critics, k^2 passes (an EDAC update at k = 10 on
    # Pendulum: 6.4 updates/s that way, 27.9 this way, benchmarks/edac_vs_ensembles.py)
    grads = jax.vmap(member_gradient)(q_params)  # [k, N, d]
    # sqrt(|g|^2 + eps^2), not |g| + eps: finite second derivatives where a gradient is 0
    grads = grads / jnp.sqrt(jnp.sum(grads**2, axis=-1, keepdims=True) + GRAD_NORM_EPS**2)
    k = grads.shape[0]
    sims = jnp.einsum("ind,jnd->nij", grads, grads)  # [N, k, k]
    off_diagonal = jnp.sum(sims, axis=(1, 2)) - jnp.trace(sims, axis1=1, axis2=2)
    return off_diagonal / max(k - 1, 1)


@dataclasses.dataclass(frozen=True)
class EDACConfig(ActorCriticBaseConfig):
    """EDAC / SAC-N with CORL's defaults (see the module docstring).

    Example:
        >>> from rljax_offline import EDACConfig
        >>> sac_n = EDACConfig().training(eta=0.0, num_critics=10)  # SAC-N
        >>> algo = (EDACConfig().environment("Pendulum-v1")
        ...         .offline_data(input_="data/pendulum_mixed")
        ...         .training(num_updates_per_iteration=20)).build()
        >>> result = algo.train()
    """

    algo_name = "edac"

    lr: float | None = option(None, "training", optional(positive_float),
                              "unused: EDAC has actor_lr, critic_lr and alpha_lr")
    train_batch_size_per_learner: int = option(256, "training", positive_int,
                                               "rows of one update, over all devices")
    actor_lr: float = option(3e-4, "training", positive_float, "learning rate of the actor")
    critic_lr: float = option(3e-4, "training", positive_float,
                              "learning rate of the Q networks")
    alpha_lr: float = option(3e-4, "training", positive_float,
                             "learning rate of the entropy coefficient")
    num_critics: int = option(10, "training", positive_int,
                              "Q networks of the ensemble, their minimum in target and actor")
    eta: float = option(1.0, "training", non_negative_float,
                        "weight of the critics' gradient-diversity term (0: SAC-N)")
    initial_alpha: float = option(1.0, "training", positive_float,
                                  "initial entropy coefficient")
    model_config: dict = option(
        {"fcnet_hiddens": [256, 256, 256], "fcnet_activation": "relu", **TORCH_DEFAULT},
        "rl_module", dict_or_none, "RLlib's model-config keys; CORL's 3x256, PyTorch's draw")

    def check_spaces(self, obs_spec, act_spec) -> None:
        check_squashed_box(self, act_spec)

    def make_spec(self, obs_spec, act_spec) -> AlgorithmSpec:
        self.check_spaces(obs_spec, act_spec)
        policy = actor(obs_spec, act_spec, self.model_config)
        dist = policy.dist
        q = ensemble(continuous_q_network(obs_spec, act_spec, self.model_config),
                     self.num_critics)
        to_unit, from_unit = action_scaler(act_spec)
        gamma, eta, shape = self.gamma, self.eta, tuple(act_spec.shape)
        entropy_target = target_entropy("auto", act_spec)

        def init(rng):
            k1, k2 = jax.random.split(rng)
            return {"policy": policy.init(k1), "q": q.init(k2),
                    "log_alpha": jnp.asarray(math.log(self.initial_alpha), jnp.float32)}

        def critic_loss(params, batch, rng, axis):
            next_q, next_logp = sampled_next_q(policy, q, params, batch["new_obs"], rng)
            y = soft_td_target(batch, next_q, next_logp, jnp.exp(params["log_alpha"]), gamma)
            td, metrics = td_regression(q, params, batch, y, with_std=True)
            if eta == 0.0:
                return td, metrics
            es = diversity(q, params["q"], batch["obs"], to_unit(batch["actions"]), from_unit,
                           shape)
            return td + eta * es, {**metrics, "diversity_loss": es}

        def actor_loss(params, batch, rng, axis):
            a, logp = sample_per_example(dist, policy.apply(params["policy"], batch["obs"]), rng)
            q_pi = jnp.min(q.apply(params["q"], batch["obs"], a), axis=0)
            loss = soft_actor_loss(jnp.exp(params["log_alpha"]), logp, q_pi)
            return loss, {"policy_loss": loss, "logp": logp}

        def alpha_loss(params, batch, rng, axis):
            _, logp = sample_per_example(dist, policy.apply(params["policy"], batch["obs"]), rng)
            loss = temperature_loss(params["log_alpha"], logp, entropy_target)
            return loss, {"alpha_loss": loss, "alpha_value": jnp.exp(params["log_alpha"])}

        learning = LearningSpec(
            init=init,
            losses=(*critic_and_actor(self, critic_loss, actor_loss),
                    Loss("alpha", ("log_alpha",), alpha_loss, make_optimizer(self.alpha_lr))),
            targets={"target_q": "q"}, tau=self.tau)
        return squashed_actor_spec(learning, policy)
