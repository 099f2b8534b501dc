"""The learner AWAC and CRR share: a Q ensemble regressing onto the target ensemble's minimum
at an action the actor draws at `s'`, and an actor that maximizes the data's log-likelihood
weighted by a function of each action's advantage under the critic,

* critic (`critic`): `y = r + gamma * (1 - terminated) * min_k Q'_k(s', a')`,
  `a' ~ pi(.|s')` (or its target `pi'`);
* actor (`actor`): `-w(A(s, a)) * log pi(a|s)`, `A(s, a) = Q(s, a) - V(s)` with `Q` one
  reduction of the ensemble (min or mean) and `V(s)` the mean or the max of that `Q` over
  `n_action_samples` actions `a_j ~ pi(.|s)`, the weights held constant.

What each algorithm chooses (the reductions, the weight, its targets, how it acts) is an
argument of `advantage_weighted_spec`; the modules `awac` and `crr` hold their configs and
equations. Acting is the actor's own (greedy: `tanh(mean)`), or CRR's critic-weighted policy
(`critic_weighted_acting`).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from rljax_offline.algorithms.actor_critic_parts import (
    clipped_q_data,
    critic_and_actor,
    sampled_next_q,
    squashed_actor_spec,
    td_regression,
    td_target,
)
from rljax_offline.algorithms.bcq import unit_to_dist_inputs
from rljax_offline.algorithms.cql import repeat_rows, sample_per_example, split_keys
from rljax_offline.learning.spec import ActingSpec, AlgorithmSpec, LearningSpec
from rljax_offline.models.actor_and_q import actor
from rljax_offline.models.distributions import Distribution, action_scaler, deterministic
from rljax_offline.models.networks import Network, continuous_q_network, ensemble
from rljax_offline.models.policy import Policy

__all__ = ["advantage_weighted_spec", "critic_weighted_acting", "policy_values"]


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
    _, values = _draws_and_values(policy, q, params, obs, keys, n, over_critics)
    return jax.lax.stop_gradient(reduce(values, axis=-1))


def _draws_and_values(policy: Policy, q: Network, params: dict, obs, keys, n: int,
                      over_critics: Callable) -> tuple[jax.Array, jax.Array]:
    """`n` actions of the current policy per state, each row's from its own key in `keys`
    `[N, 2]`, and `over_critics` of their Q: `(actions [N * n, ...], values [N, n])`."""
    inputs = policy.apply(params["policy"], obs)
    actions, _ = sample_per_example(policy.dist, repeat_rows(inputs, n),
                                    split_keys(keys, n).reshape(-1, 2))
    values = over_critics(q.apply(params["q"], repeat_rows(obs, n), actions), axis=0)
    return actions, values.reshape(keys.shape[0], n)


def critic_weighted_acting(policy: Policy, q: Network, act_spec, n: int) -> ActingSpec:
    """CRR's critic-weighted policy (d3rlpy's `predict`): per state, `n` actions drawn from
    the actor, then one of them drawn with probabilities `softmax(Q)` (the ensemble's mean
    Q), all from the step's key. Its output is a `deterministic` distribution's inputs (the
    chosen action), as BCQ's candidate selection.

    Args:
      policy: the actor (a squashed Gaussian on `params["policy"]`).
      q: the Q ensemble on `params["q"]`.
      act_spec: the bounded Box action space's spec.
      n: the actions drawn per state.
    """
    to_unit, _ = action_scaler(act_spec)

    def act(params, key, obs):
        rows = jax.tree_util.tree_leaves(obs)[0].shape[0]
        draw, pick = jax.random.split(key)
        actions, values = _draws_and_values(policy, q, params, obs,
                                             jax.random.split(draw, rows), n, jnp.mean)
        chosen = jax.random.categorical(pick, values, axis=-1)
        unit = to_unit(actions).reshape(rows, n, -1)[jnp.arange(rows), chosen]
        return unit_to_dist_inputs(unit)

    return ActingSpec(act=act, dist=deterministic(act_spec), takes_key=True)


def advantage_weighted_spec(config, obs_spec, act_spec, *, over_critics: Callable,
                            reduce: Callable, weight: Callable, target_policy: bool,
                            tau: float, target_update_period: int = 1,
                            critic_weighted: bool = False,
                            policy: Policy | None = None,
                            soft_target: Distribution | None = None) -> AlgorithmSpec:
    """The spec of the learner above for `config` (its `gamma`, `n_critics`,
    `n_action_samples`, `model_config`, `actor_lr`, `critic_lr`, `grad_clip`; the spaces
    already checked): a tanh-squashed Gaussian actor (or `policy`), acting with it greedily
    or through `critic_weighted_acting`.

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
      critic_weighted: act by `critic_weighted_acting` with `n_action_samples` draws.
      policy: the actor (default: the tanh-squashed Gaussian of `model_config`).
      soft_target: d3rlpy's AWAC target, a diagnosis: `a'` drawn from this distribution of
        the actor's outputs and `y = r + gamma * (1 - d) * (min_k Q'_k(s', a') - log
        pi(a'|s'))`, SAC's target at a temperature fixed at 1 (None: no entropy term).
    """
    if policy is None:
        policy = actor(obs_spec, act_spec, config.model_config)
    q = ensemble(continuous_q_network(obs_spec, act_spec, config.model_config),
                 config.n_critics)
    gamma, n = config.gamma, config.n_action_samples
    next_policy = "target_policy" if target_policy else "policy"

    def init(rng):
        k1, k2 = jax.random.split(rng)
        return {"policy": policy.init(k1), "q": q.init(k2)}

    next_actor = policy if soft_target is None else policy._replace(dist=soft_target)

    def critic_loss(params, batch, rng, axis):
        next_q, next_logp = sampled_next_q(next_actor, q, params, batch["new_obs"], rng,
                                           next_policy)
        if soft_target is not None:
            next_q = next_q - next_logp
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
    if critic_weighted:
        return AlgorithmSpec(learning, critic_weighted_acting(policy, q, act_spec, n),
                             clipped_q_data())
    return squashed_actor_spec(learning, policy)
