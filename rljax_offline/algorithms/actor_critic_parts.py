"""The pieces the zoo's actor-critic learners build their specs from (AWAC, CRR, BCQ, PLAS,
BEAR, EDAC, TD3+BC, ReBRAC), written once so that an algorithm's module holds only what is its
own:

* `td_target` and `td_regression`: the bootstrapped target `r + gamma * (1 - terminated) *
  next_value` (held constant) and the Q ensemble's squared error to it, summed over the
  ensemble, with the metrics every critic reports (`qf_loss`, `qf_mean`, `td_target_mean`);
* `mixed_min_max`: the lambda mix of the ensemble's minimum and maximum (BCQ, PLAS, BEAR);
* `sampled_next_q`: the target ensemble's minimum at an action drawn from a stochastic actor
  at `s'` (AWAC, CRR, EDAC);
* `unit_box`: the maps between the env's Box actions and the unit box `[-1, 1]`;
* `during`: an optimizer applied on a range of updates only (warm-up phases);
* `critic_and_actor`: the two losses' `Loss` entries, each with its own rate;
* `clipped_q_data` and `squashed_actor_spec`: the Q-learning columns with the data's actions
  clipped to the bounds, and the spec of a learner that acts with its squashed Gaussian
  actor.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from rljax_offline.algorithms.actor_critic_base import Q_COLUMNS
from rljax_offline.algorithms.cql import sample_per_example
from rljax_offline.connectors.learner import clip_actions_inside_bounds
from rljax_offline.learning.losses import not_terminal
from rljax_offline.learning.optim import make_optimizer
from rljax_offline.learning.spec import ActingSpec, AlgorithmSpec, DataSpec, LearningSpec, Loss
from rljax_offline.models.distributions import action_scaler
from rljax_offline.models.networks import Network
from rljax_offline.models.policy import Policy

__all__ = ["clipped_q_data", "critic_and_actor", "during", "mixed_min_max", "sampled_next_q",
           "squashed_actor_spec", "td_regression", "td_target", "unit_box"]


def td_target(batch: dict, next_value: jax.Array, gamma: float) -> jax.Array:
    """`y = r + gamma * (1 - terminated) * next_value` `[N]`, held constant in the gradient.

    Args:
      batch: the train batch (`rewards`, `terminateds`).
      next_value: the value of `s'` `[N]`.
      gamma: the discount.
    """
    return jax.lax.stop_gradient(batch["rewards"] + gamma * not_terminal(batch) * next_value)


def td_regression(q: Network, params: dict, batch: dict, y: jax.Array, with_std: bool = False
                  ) -> tuple[jax.Array, dict]:
    """The ensemble `params["q"]`'s squared error to `y` at the data's actions, summed over
    the ensemble (`[N]`), and its metrics.

    Args:
      q: the Q ensemble (`apply(params, obs, actions) -> [k, N]`).
      params: all the params (the ensemble's under `"q"`).
      batch: the train batch (`obs`, `actions`).
      y: the target `[N]`.
      with_std: also report the ensemble's spread (`qf_std`).
    """
    qs = q.apply(params["q"], batch["obs"], batch["actions"])  # [k, N]
    loss = jnp.sum((qs - y) ** 2, axis=0)
    metrics = {"qf_loss": loss, "qf_mean": qs.mean(0), "td_target_mean": y}
    return loss, ({**metrics, "qf_std": qs.std(0)} if with_std else metrics)


def mixed_min_max(values: jax.Array, lam: float) -> jax.Array:
    """`lam * min_k Q_k + (1 - lam) * max_k Q_k` over the ensemble axis 0 of `values`.

    Args:
      values: Q values `[k, ...]`.
      lam: the minimum's weight.
    """
    return lam * jnp.min(values, axis=0) + (1.0 - lam) * jnp.max(values, axis=0)


def sampled_next_q(policy: Policy, q: Network, params: dict, new_obs, keys: jax.Array,
                   policy_params: str = "policy") -> tuple[jax.Array, jax.Array]:
    """`(min_k Q'_k(s', a'), log pi(a'|s'))` `[N]` each, `a' ~ pi(.|s')` drawn with a key per
    row, Q' the target ensemble (`params["target_q"]`).

    Args:
      policy: the stochastic actor.
      q: the Q ensemble.
      params: all the params.
      new_obs: the next observations `s'`.
      keys: per-row keys `[N, 2]`.
      policy_params: the actor's params entry (`"target_policy"`: its target).
    """
    next_a, next_logp = sample_per_example(
        policy.dist, policy.apply(params[policy_params], new_obs), keys)
    return jnp.min(q.apply(params["target_q"], new_obs, next_a), axis=0), next_logp


def unit_box(act_spec) -> tuple[Callable, Callable]:
    """`(to_unit, env_action)`: the env's Box actions to the unit box `[-1, 1]` (flat), and
    unit actions `[N, dim]` back to env actions in the space's shape.

    Args:
      act_spec: the Box action space's spec (finite bounds).
    """
    to_unit, from_unit = action_scaler(act_spec)
    shape = tuple(act_spec.shape)

    def env_action(unit):
        return from_unit(unit).reshape(unit.shape[0], *shape)

    return to_unit, env_action


def during(optimizer: optax.GradientTransformation, start: int = 0, stop: int | None = None
           ) -> optax.GradientTransformation:
    """`optimizer` applied only on updates `start <= t < stop` of its loss (counted by its
    own state); on the others its updates are zero and its state (Adam's moments and step
    count) is left as it is, as if the update had not happened (d3rlpy's skipped updates).

    Args:
      optimizer: the optax transformation.
      start: the first update it applies.
      stop: the first update it no longer applies (None: never stops).
    """
    if start == 0 and stop is None:
        return optimizer

    def applies(t):
        return t >= start if stop is None else (t >= start) & (t < stop)

    return optax.transforms.conditionally_mask(optimizer, applies)


def critic_and_actor(config, critic_loss: Callable, actor_loss: Callable, *,
                     actor_nets: tuple = ("policy",), start: int = 0, every: int = 1
                     ) -> tuple[Loss, Loss]:
    """The `critic` loss (on `q`, at `config.critic_lr`) and the `actor` loss (on
    `actor_nets`, at `config.actor_lr`), both clipped at `config.grad_clip`.

    Args:
      config: the algorithm's config.
      critic_loss: the critic's per-example loss function.
      actor_loss: the actor's per-example loss function.
      actor_nets: the params entries the actor's loss trains.
      start: the first update either applies (`during`; 0: all).
      every: the actor's optimizer steps on every `every`-th update only.
    """
    return (Loss("critic", ("q",), critic_loss,
                 during(make_optimizer(config.critic_lr, config.grad_clip), start)),
            Loss("actor", actor_nets, actor_loss,
                 during(make_optimizer(config.actor_lr, config.grad_clip), start), every=every))


def clipped_q_data(**clip) -> DataSpec:
    """The Q-learning columns (`Q_COLUMNS`), the data's actions clipped by the learner
    pipeline (`clip_actions_inside_bounds(**clip)`).

    Args:
      **clip: `clip_actions_inside_bounds`'s arguments (`margin=0.0`: to the bounds).
    """
    return DataSpec(columns=Q_COLUMNS, learner_connector=(clip_actions_inside_bounds(**clip),))


def squashed_actor_spec(learning: LearningSpec, policy: Policy) -> AlgorithmSpec:
    """A learner that acts with its tanh-squashed Gaussian actor `params["policy"]` and learns
    from the Q-learning columns, the data's actions clipped just inside the bounds (where the
    actor has a density).

    Args:
      learning: the learning spec.
      policy: the actor.
    """
    acting = ActingSpec(act=lambda params, obs: policy.apply(params["policy"], obs),
                        dist=policy.dist, policy=policy)
    return AlgorithmSpec(learning, acting, clipped_q_data())
