"""CRR (Wang et al. 2020, "Critic Regularized Regression"): the actor regresses onto the data's
actions, each weighted by a function of its advantage under the critic, so it keeps the
data's good actions and drops the bad ones.

* critic (`critic`): the ensemble regresses `y = r + gamma * (1 - terminated) * min_k
  Q'_k(s', a')`, `a' ~ pi'(.|s')` (the target policy);
* actor (`actor`): `-f(A(s, a)) * log pi(a|s)` with `A(s, a) = Q(s, a) - V(s)`, Q the
  ensemble's mean, `V(s)` the mean (`advantage_type="mean"`) or the maximum (`"max"`) of Q
  over `n_action_samples` actions `a_j ~ pi(.|s)`, and
  `f = min(exp(A / beta), max_weight)` (`weight_type="exp"`) or `1[A > 0]` (`"binary"`),
  held constant;
* targets (Q and policy): hard copies every `target_update_interval` updates
  (`target_update_type="hard"`) or Polyak with `tau` every update (`"soft"`).

Defaults are d3rlpy 2.8's `CRRConfig` under its names (RLlib has no CRR): `beta=1.0`,
`n_action_samples=4`, `advantage_type="mean"`, `weight_type="exp"`, `max_weight=20.0`,
`n_critics=1`, `target_update_type="hard"`, `target_update_interval=100`, `tau=0.005`,
learning rates 3e-4, batch 100, `gamma=0.99`, 256-256 ReLU networks from PyTorch's draw.
Differences from d3rlpy's code: the actor is the tanh-squashed Gaussian that CQL, IQL and SAC
share (d3rlpy's: a Gaussian around a tanh mean, log-std in [-6, 0]); and acting takes the
policy's greedy action, where d3rlpy's `predict` resamples `n_action_samples` policy actions
by `softmax(Q)` (the paper's critic-weighted policy, which needs a random key at acting
time). Box actions with finite bounds only; no recurrent form.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from rljax_offline.algorithms.actor_critic_base import (
    Q_COLUMNS,
    ActorCriticBaseConfig,
    check_squashed_box,
)
from rljax_offline.algorithms.awac import policy_values
from rljax_offline.algorithms.cql import sample_per_example
from rljax_offline.algorithms.options import (
    non_negative_float,
    one_of,
    option,
    optional,
    positive_float,
    positive_int,
)
from rljax_offline.connectors.learner import clip_actions_inside_bounds
from rljax_offline.learning.losses import not_terminal
from rljax_offline.learning.optim import make_optimizer
from rljax_offline.learning.spec import ActingSpec, AlgorithmSpec, DataSpec, LearningSpec, Loss
from rljax_offline.models.actor_and_q import actor
from rljax_offline.models.networks import continuous_q_network, ensemble


@dataclasses.dataclass(frozen=True)
class CRRConfig(ActorCriticBaseConfig):
    """CRR with d3rlpy's names and defaults (see the module docstring).

    Example:
        >>> from rljax_offline import CRRConfig
        >>> algo = (CRRConfig().environment("Pendulum-v1")
        ...         .offline_data(input_="data/pendulum_mixed")
        ...         .training(weight_type="binary", num_updates_per_iteration=20)
        ...         .learners(num_devices=1)).build()  # batch 100 (d3rlpy's): not over 8
        >>> result = algo.train()
    """

    algo_name = "crr"

    lr: float | None = option(None, "training", optional(positive_float),
                              "unused: CRR has actor_lr and critic_lr")
    train_batch_size_per_learner: int = option(100, "training", positive_int,
                                               "rows of one update, over all devices")
    actor_lr: float = option(3e-4, "training", positive_float, "learning rate of the actor")
    critic_lr: float = option(3e-4, "training", positive_float,
                              "learning rate of the Q networks")
    beta: float = option(1.0, "training", positive_float,
                         "temperature of the exponential weights exp(A / beta)")
    n_action_samples: int = option(4, "training", positive_int,
                                   "policy actions per state that estimate V(s)")
    advantage_type: str = option("mean", "training", one_of("mean", "max"),
                                 "V(s) as the mean or the max of Q over the sampled actions")
    weight_type: str = option("exp", "training", one_of("exp", "binary"),
                              "f(A): min(exp(A / beta), max_weight) or 1[A > 0]")
    max_weight: float = option(20.0, "training", non_negative_float,
                               "upper clip of the exponential weights")
    n_critics: int = option(1, "training", positive_int,
                            "Q networks of the ensemble (their minimum in targets)")
    target_update_type: str = option("hard", "training", one_of("hard", "soft"),
                                     "hard copies every target_update_interval updates, or "
                                     "Polyak with tau every update")
    target_update_interval: int = option(100, "training", positive_int,
                                         "updates between hard target copies")

    def check_spaces(self, obs_spec, act_spec) -> None:
        check_squashed_box(self, act_spec)

    def make_spec(self, obs_spec, act_spec) -> AlgorithmSpec:
        self.check_spaces(obs_spec, act_spec)
        policy = actor(obs_spec, act_spec, self.model_config)
        q = ensemble(continuous_q_network(obs_spec, act_spec, self.model_config),
                     self.n_critics)
        gamma, beta, n, max_weight = (self.gamma, self.beta, self.n_action_samples,
                                      self.max_weight)
        reduce = jnp.mean if self.advantage_type == "mean" else jnp.max
        binary = self.weight_type == "binary"

        def init(rng):
            k1, k2 = jax.random.split(rng)
            return {"policy": policy.init(k1), "q": q.init(k2)}

        def critic_loss(params, batch, rng, axis):
            next_a, _ = sample_per_example(
                policy.dist, policy.apply(params["target_policy"], batch["new_obs"]), rng)
            next_q = jnp.min(q.apply(params["target_q"], batch["new_obs"], next_a), axis=0)
            y = jax.lax.stop_gradient(batch["rewards"] + gamma * not_terminal(batch) * next_q)
            qs = q.apply(params["q"], batch["obs"], batch["actions"])
            loss = jnp.sum((qs - y) ** 2, axis=0)
            return loss, {"qf_loss": loss, "qf_mean": qs.mean(0), "td_target_mean": y}

        def actor_loss(params, batch, rng, axis):
            q_data = jnp.mean(q.apply(params["q"], batch["obs"], batch["actions"]), axis=0)
            v = policy_values(policy, q, params, batch["obs"], rng, n, reduce, jnp.mean)
            adv = jax.lax.stop_gradient(q_data) - v
            weight = ((adv > 0).astype(adv.dtype) if binary
                      else jnp.clip(jnp.exp(adv / beta), 0.0, max_weight))
            logp = policy.dist.logp(policy.apply(params["policy"], batch["obs"]),
                                    batch["actions"])
            loss = -weight * logp
            return loss, {"policy_loss": loss, "advantage_mean": adv,
                          "advantage_weight_mean": weight, "logp": logp}

        hard = self.target_update_type == "hard"
        learning = LearningSpec(
            init=init,
            losses=(Loss("critic", ("q",), critic_loss,
                         make_optimizer(self.critic_lr, self.grad_clip)),
                    Loss("actor", ("policy",), actor_loss,
                         make_optimizer(self.actor_lr, self.grad_clip))),
            targets={"target_q": "q", "target_policy": "policy"},
            tau=1.0 if hard else self.tau,
            target_update_period=self.target_update_interval if hard else 1)
        acting = ActingSpec(act=lambda params, obs: policy.apply(params["policy"], obs),
                            dist=policy.dist, policy=policy)
        return AlgorithmSpec(learning, acting, DataSpec(
            columns=Q_COLUMNS, learner_connector=(clip_actions_inside_bounds(),)))
