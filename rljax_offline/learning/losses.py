"""Loss maths the algorithms share: Q of the taken action, the TD target's continuation
flag, SAC's soft TD target, actor and temperature losses and entropy target, expectile and
Huber losses, and per-example random draws (one key per example, so a draw does not depend on
the sharding). Pure functions of arrays."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from rljax_offline import spaces as sp
from rljax_offline.models.recurrent import step_rows


def take_action(q_all: jax.Array, actions: jax.Array) -> jax.Array:
    """`Q(s, a)` from per-action values `[..., N, n]` and integer actions `[N]`.

    Args:
      q_all: per-action values `[..., N, n]`.
      actions: integer actions `[N]`.
    """
    idx = jnp.broadcast_to(actions.astype(jnp.int32).reshape(-1, 1),
                           q_all.shape[:-1] + (1,))
    return jnp.take_along_axis(q_all, idx, axis=-1)[..., 0]


def not_terminal(batch: dict) -> jax.Array:
    """1 where the next observation continues the episode (bootstrapping allowed), 0 after a
    terminal step; truncated steps still bootstrap (RLlib's `terminateds`).

    Args:
      batch: a train batch with RLlib's `terminateds` column.
    """
    return 1.0 - step_rows(batch, "terminateds").astype(jnp.float32)


def target_entropy(target: float | str | None, act_spec: sp.BoxSpec | sp.DiscreteSpec
                   ) -> float:
    """SAC's automatic entropy target for "auto" or None: `-dim(actions)` for Box actions,
    `0.98 * log(n)` for `Discrete(n)` (RLlib's: near the uniform policy's entropy).

    Args:
      target: a number (kept), or "auto" / None for the automatic one.
      act_spec: the action space's spec.
    """
    if target in (None, "auto"):
        if isinstance(act_spec, sp.DiscreteSpec):
            return 0.98 * math.log(act_spec.n)
        return -float(math.prod(act_spec.shape) or 1)
    return float(target)


def expectile_loss(diff: jax.Array, expectile: float) -> jax.Array:
    """`|expectile - 1(diff < 0)| * diff**2`: asymmetric least squares; `expectile > 0.5`
    fits the upper part of the distribution of `diff`'s first term (IQL's value loss).

    Args:
      diff: the residuals.
      expectile: in (0, 1); 0.5 is the squared error.
    """
    weight = jnp.where(diff > 0, expectile, 1.0 - expectile)
    return weight * diff**2


def huber(x: jax.Array, delta: float = 1.0) -> jax.Array:
    """Huber loss of residuals (the TD loss of DQN and d3rlpy's DiscreteCQL).

    Args:
      x: the residuals.
      delta: where the loss turns from quadratic to linear.
    """
    ax = jnp.abs(x)
    return jnp.where(ax <= delta, 0.5 * x**2, delta * (ax - 0.5 * delta))


def per_example_normal(keys: jax.Array, shape: tuple = ()) -> jax.Array:
    """Standard normals `[N, *shape]`, one draw per example key.

    Args:
      keys: one key per example, `[N, 2]`.
      shape: each draw's shape.
    """
    return jax.vmap(lambda k: jax.random.normal(k, shape))(keys)


def per_example_uniform(keys: jax.Array, shape: tuple = (), minval=0.0, maxval=1.0):
    """Uniforms in `[minval, maxval)`, `[N, *shape]`, one draw per example key.

    Args:
      keys: one key per example, `[N, 2]`.
      shape: each draw's shape.
      minval: the lower bound (included).
      maxval: the upper bound (excluded).
    """
    return jax.vmap(lambda k: jax.random.uniform(k, shape, minval=minval, maxval=maxval))(keys)


def soft_td_target(batch: dict, next_q: jax.Array, next_logp: jax.Array, alpha: jax.Array,
                   gamma: float) -> jax.Array:
    """SAC's soft target `R + gamma**n * (1 - terminated) * (min_k Q'(s', a') - alpha *
    logp(a'|s'))`, held constant in the gradient; `n` is the batch's `n_step` column (the
    rewards summed into `R`), 1 where it has none.

    Args:
      batch: the train batch (`rewards`, `terminateds`, optionally `n_step`).
      next_q: `min_k Q'(s', a')`, the target ensemble's minimum (taken by the caller).
      next_logp: `logp(a'|s')` of the actions drawn at `s'`.
      alpha: the temperature.
      gamma: the discount.
    """
    n = step_rows(batch, "n_step").astype(jnp.float32) if "n_step" in batch else 1.0
    soft = next_q - alpha * next_logp
    return jax.lax.stop_gradient(step_rows(batch, "rewards")
                                 + gamma ** n * not_terminal(batch) * soft)


def soft_actor_loss(alpha: jax.Array, logp: jax.Array, q_pi: jax.Array) -> jax.Array:
    """SAC's actor loss `alpha * logp(a|s) - min_k Q(s, a)`, alpha held constant.

    Args:
      alpha: the temperature (held constant).
      logp: `logp(a|s)` of the actions drawn.
      q_pi: `min_k Q(s, a)` of those actions (taken by the caller).
    """
    return jax.lax.stop_gradient(alpha) * logp - q_pi


def temperature_loss(log_alpha: jax.Array, logp: jax.Array, entropy_target: float) -> jax.Array:
    """SAC's temperature loss `-log_alpha * (logp + target)`: alpha grows while the policy's
    entropy `-logp` is below the target, shrinks while above it.

    Args:
      log_alpha: the learned log-temperature.
      logp: `logp(a|s)` of the actions drawn (held constant).
      entropy_target: the target entropy (`target_entropy`).
    """
    return -log_alpha * jax.lax.stop_gradient(logp + entropy_target)


def batch_softmax_weights(x: jax.Array, mask: jax.Array, axis) -> jax.Array:
    """`softmax(x)` over the global batch (every device's rows where `mask` is nonzero) times
    the number of such rows: weights of mean 1 (AWAC's normalized advantage weights). Shifted
    by the global maximum, so large `x` do not overflow; held constant in the gradient."""
    x = jax.lax.stop_gradient(x)
    e = jnp.exp(x - axis.max(x, mask)) * (mask > 0)
    return e / jnp.maximum(axis.mean(e, mask), jnp.finfo(e.dtype).tiny)
