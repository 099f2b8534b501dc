"""The learner AWAC and CRR share: a Q ensemble regressing onto the target ensemble's minimum
at an action the actor draws at `s'`, and an actor that maximizes the data's log-likelihood
weighted by a function of each action's advantage under the critic,

* critic (`critic`): `y = r + gamma * (1 - terminated) * min_k Q'_k(s', a')`,
  `a' ~ pi(.|s')` (or its target `pi'`);
* actor (`actor`): `-w(A(s, a)) * log pi(a|s)`, `A(s, a) = Q(s, a) - V(s)` with `Q` one
  reduction of the ensemble (min or mean) and `V(s)` the mean or the max of that `Q` over
  `n_action_samples` actions `a_j ~ pi(.|s)`, the weights held constant.

What each algorithm chooses (the reductions, the weight, its targets) is an argument of
`advantage_weighted_spec`; the modules `awac` and `crr` hold their configs and equations.
"""

from __future__ import annotations

from collections.abc import Callable

import jax

from rljax_offline.algorithms.actor_critic_parts import (
    critic_and_actor,
    sampled_next_q,
    squashed_actor_spec,
    td_regression,
    td_target,
)
from rljax_offline.algorithms.cql import repeat_rows, sample_per_example, split_keys
from rljax_offline.learning.spec import AlgorithmSpec, LearningSpec
from rljax_offline.models.actor_and_q import actor
from rljax_offline.models.networks import Network, continuous_q_network, ensemble
from rljax_offline.models.policy import Policy

__all__ = ["advantage_weighted_spec", "policy_values"]


def policy_values(policy: Policy, q: Network, params: dict, obs, keys, n: int,
                  reduce: Callable, over_critics: Callable) -> jax.Array:
    """`V(s)` estimated from `n` actions of the current policy per state: `reduce` (mean or
    max over the samples) of `over_critics` (min or mean over the ensemble) of Q; `[N]`,
    held constant.

    Args:
      policy: the actor.
      q: the Q ensemble.
      params: all the params (`policy`, `q`).
      obs: the observations `[N, ...]`.
      keys: per-row keys `[N, 2]`.
      n: the actions drawn per state.
      reduce: `jnp.mean` or `jnp.max`, over the samples.
      over_critics: `jnp.min` or `jnp.mean`, over the ensemble.
    """
    rows = keys.shape[0]
    inputs = policy.apply(params["policy"], obs)
    actions, _ = sample_per_example(policy.dist, repeat_rows(inputs, n),
                                    split_keys(keys, n).reshape(-1, 2))
    values = over_critics(q.apply(params["q"], repeat_rows(obs, n), actions), axis=0)
    return jax.lax.stop_gradient(reduce(values.reshape(rows, n), axis=-1))


def advantage_weighted_spec(config, obs_spec, act_spec, *, over_critics: Callable,
                            reduce: Callable, weight: Callable, target_policy: bool,
                            tau: float, target_update_period: int = 1) -> AlgorithmSpec:
    """The spec of the learner above for `config` (its `gamma`, `n_critics`,
    `n_action_samples`, `model_config`, `actor_lr`, `critic_lr`, `grad_clip`; the spaces
    already checked): a tanh-squashed Gaussian actor, acting with it.

    Args:
      config: the algorithm's config.
      obs_spec: the observation space's spec.
      act_spec: the action space's spec.
      over_critics: `jnp.min` or `jnp.mean`: the ensemble's Q of an action.
      reduce: `jnp.mean` or `jnp.max`: `V(s)` from the sampled actions' Q.
      weight: `(advantage [N], batch, axis) -> (weight [N], metrics)`.
      target_policy: draw `a'` from a target actor (Polyak or copied as the Q targets are).
      tau: the targets' Polyak weight (1: a copy).
      target_update_period: updates between target updates.
    """
    policy = actor(obs_spec, act_spec, config.model_config)
    q = ensemble(continuous_q_network(obs_spec, act_spec, config.model_config),
                 config.n_critics)
    gamma, n = config.gamma, config.n_action_samples
    next_policy = "target_policy" if target_policy else "policy"

    def init(rng):
        k1, k2 = jax.random.split(rng)
        return {"policy": policy.init(k1), "q": q.init(k2)}

    def critic_loss(params, batch, rng, axis):
        next_q, _ = sampled_next_q(policy, q, params, batch["new_obs"], rng, next_policy)
        return td_regression(q, params, batch, td_target(batch, next_q, gamma))

    def actor_loss(params, batch, rng, axis):
        q_data = over_critics(q.apply(params["q"], batch["obs"], batch["actions"]), axis=0)
        v = policy_values(policy, q, params, batch["obs"], rng, n, reduce, over_critics)
        adv = jax.lax.stop_gradient(q_data) - v
        w, weight_metrics = weight(adv, batch, axis)
        logp = policy.dist.logp(policy.apply(params["policy"], batch["obs"]),
                                batch["actions"])
        loss = -w * logp
        return loss, {"policy_loss": loss, "advantage_mean": adv, **weight_metrics,
                      "logp": logp}

    targets = {"target_q": "q", **({"target_policy": "policy"} if target_policy else {})}
    learning = LearningSpec(init=init, losses=critic_and_actor(config, critic_loss, actor_loss),
                            targets=targets, tau=tau, target_update_period=target_update_period)
    return squashed_actor_spec(learning, policy)
