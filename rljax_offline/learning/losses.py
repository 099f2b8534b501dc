"""Pieces that the actor-critic offline learners (CQL, IQL) share: their actor, their Q
ensembles and the TD target's pieces, each a pure function of specs and params."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.algorithms.config import ConfigError
from rljax_offline.models.distributions import squashed_gaussian
from rljax_offline.models.networks import (
    Network,
    continuous_q_network,
    discrete_q_network,
    ensemble,
)
from rljax_offline.models.policy import Policy, make_policy
from rljax_offline.models.recurrent import step_rows


def actor(obs_spec: Any, act_spec: Any, model_config: dict, *, squashed: bool = True
          ) -> Policy:
    """The policy network: categorical for Discrete actions; for Box actions a tanh-squashed
    Gaussian whose samples and greedy actions are env actions inside the bounds (SAC's actor,
    which RLlib's CQL and IQL use), or RLlib's plain Gaussian with `squashed=False`."""
    policy = make_policy(obs_spec, act_spec, **model_config)
    if squashed and isinstance(act_spec, sp.BoxSpec):
        check_bounded(act_spec, "a tanh-squashed actor")
        policy = policy._replace(dist=squashed_gaussian(act_spec))
    return policy


def check_bounded(act_spec: sp.BoxSpec, what: str) -> None:
    """A named error for Box actions without finite bounds."""
    if not (np.all(np.isfinite(act_spec.low)) and np.all(np.isfinite(act_spec.high))):
        raise ConfigError(f"{what} needs a Box action space with finite bounds, got {act_spec}")


def q_ensemble(obs_spec: Any, act_spec: Any, model_config: dict, twin_q: bool) -> Network:
    """One or two independent Q networks applied together: `apply(params, obs[, actions])
    -> [k, N]` (Box: Q(s, a)) or `[k, N, n]` (Discrete: Q(s, .)); `steps` / `head` the same
    for learner batches, recurrent ones included (`models.networks`)."""
    q = (discrete_q_network(obs_spec, act_spec, model_config)
         if isinstance(act_spec, sp.DiscreteSpec)
         else continuous_q_network(obs_spec, act_spec, model_config))
    return ensemble(q, 2 if twin_q else 1)


def take_action(q_all: jax.Array, actions: jax.Array) -> jax.Array:
    """`Q(s, a)` from per-action values `[..., N, n]` and integer actions `[N]`."""
    idx = jnp.broadcast_to(actions.astype(jnp.int32).reshape(-1, 1),
                           q_all.shape[:-1] + (1,))
    return jnp.take_along_axis(q_all, idx, axis=-1)[..., 0]


def not_terminal(batch: dict) -> jax.Array:
    """1 where the next observation continues the episode (bootstrapping allowed), 0 after a
    terminal step; truncated steps still bootstrap (RLlib's `terminateds`)."""
    return 1.0 - step_rows(batch, "terminateds").astype(jnp.float32)


def target_entropy(target: float | str | None, act_spec: sp.BoxSpec) -> float:
    """SAC's automatic entropy target: `-dim(actions)` for "auto" or None."""
    if target in (None, "auto"):
        return -float(math.prod(act_spec.shape) or 1)
    return float(target)


def expectile_loss(diff: jax.Array, expectile: float) -> jax.Array:
    """`|expectile - 1(diff < 0)| * diff**2`: asymmetric least squares; `expectile > 0.5`
    fits the upper part of the distribution of `diff`'s first term (IQL's value loss)."""
    weight = jnp.where(diff > 0, expectile, 1.0 - expectile)
    return weight * diff**2


def huber(x: jax.Array, delta: float = 1.0) -> jax.Array:
    """Huber loss of residuals (the TD loss of DQN and d3rlpy's DiscreteCQL)."""
    ax = jnp.abs(x)
    return jnp.where(ax <= delta, 0.5 * x**2, delta * (ax - 0.5 * delta))
