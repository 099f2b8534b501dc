"""Action distributions from `action_dist_inputs` (RLlib's layout): categorical logits for
Discrete actions, `concat([mean, log_std])` of a diagonal Gaussian for Box actions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr

from rljax_offline import spaces as sp

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


class Distribution(NamedTuple):
    """Pure functions of `action_dist_inputs` ([..., dist_dim]).

    Attributes:
      dist_dim: the width of `action_dist_inputs`.
      logp: `(inputs, actions) -> [...]`, the log-probability (density) of the actions.
      sample: `(inputs, rng) -> actions`.
      greedy: `inputs -> actions` (argmax, or the mean).
      entropy: `inputs -> [...]`.
      sample_and_logp: `(inputs, rng) -> (actions, logp)`, reparameterised (gradients flow
        through the actions); None where the family has none.
      kind: the family ("categorical", "gaussian", "squashed_gaussian", "clipped_gaussian",
        "tanh_mean_gaussian", "deterministic"):
        two policies can share weights only where their families agree.
    """

    dist_dim: int
    logp: callable        # (inputs, actions) -> [...]
    sample: callable      # (inputs, rng) -> actions
    greedy: callable      # inputs -> actions (argmax / mean)
    entropy: callable     # inputs -> [...]
    # (inputs, rng) -> (actions, logp), reparameterised (gradients flow through the actions)
    sample_and_logp: callable = None
    # what family it is ("categorical", "gaussian", "squashed_gaussian", "deterministic"):
    # two policies can share weights only where their families agree
    kind: str = ""


def categorical(n: int, start: int = 0) -> Distribution:
    """Categorical over the env's action values `start, ..., start + n - 1` (gymnasium's
    `Discrete(n, start=s)`): `logp` takes, and `sample`/`greedy` return, those values; logit
    `i` belongs to action `start + i`. Out-of-range actions get the most negative finite
    log-probability.

    Args:
      n: the number of actions.
      start: the first action's value (`Discrete(n, start=start)`).
    """

    def logp(inputs, actions):
        logits = jax.nn.log_softmax(inputs, axis=-1)
        index = actions.astype(jnp.int32) - start
        valid = (index >= 0) & (index < n)
        picked = jnp.take_along_axis(logits, jnp.clip(index, 0, n - 1)[..., None], -1)[..., 0]
        # The most negative finite float, not -inf: padded rows (masked out by a 0 weight)
        # must give 0, not NaN, whatever action value they hold.
        return jnp.where(valid, picked, jnp.finfo(picked.dtype).min)

    def entropy(inputs):
        logp_all = jax.nn.log_softmax(inputs, axis=-1)
        return -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1)

    def sample(inputs, rng):
        return jax.random.categorical(rng, inputs, axis=-1) + start

    return Distribution(
        dist_dim=n, logp=logp, sample=sample,
        greedy=lambda inputs: jnp.argmax(inputs, axis=-1) + start, entropy=entropy,
        sample_and_logp=lambda inputs, rng: (sample(inputs, rng),
                                             logp(inputs, sample(inputs, rng))),
        kind="categorical")


def diag_gaussian(dim: int) -> Distribution:
    """A diagonal Gaussian (RLlib's for Box actions): `action_dist_inputs` are
    `concat(mean, log_std)`, `log_std` clipped to `[LOG_STD_MIN, LOG_STD_MAX]`; greedy is the
    mean.

    Args:
      dim: the action's flat size.
    """

    def split(inputs):
        mean, log_std = jnp.split(inputs, 2, axis=-1)
        return mean, jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)

    def logp(inputs, actions):
        mean, log_std = split(inputs)
        z = (actions.reshape(mean.shape) - mean) / jnp.exp(log_std)
        return jnp.sum(-0.5 * z**2 - log_std - 0.5 * jnp.log(2 * jnp.pi), axis=-1)

    def sample(inputs, rng):
        mean, log_std = split(inputs)
        return mean + jnp.exp(log_std) * jax.random.normal(rng, mean.shape)

    def entropy(inputs):
        _, log_std = split(inputs)
        return jnp.sum(log_std + 0.5 * jnp.log(2 * jnp.pi * jnp.e), axis=-1)

    def sample_and_logp(inputs, rng):
        actions = sample(inputs, rng)
        return actions, logp(inputs, actions)

    return Distribution(dist_dim=2 * dim, logp=logp, sample=sample,
                        greedy=lambda inputs: split(inputs)[0], entropy=entropy,
                        sample_and_logp=sample_and_logp, kind="gaussian")


def action_scaler(act_spec: Any) -> tuple[Callable, Callable]:
    """`(to_unit, from_unit)`: Box actions to [-1, 1] by the space's bounds and back
    (identity for unbounded dimensions).

    Args:
      act_spec: the Box action space's spec.
    """
    act_spec = sp.to_spec(act_spec)
    low = np.asarray(act_spec.low, np.float32).reshape(-1)
    high = np.asarray(act_spec.high, np.float32).reshape(-1)
    bounded = np.isfinite(low) & np.isfinite(high)
    low, high = np.where(bounded, low, -1.0), np.where(bounded, high, 1.0)
    mid = ((high + low) / 2).astype(np.float32)
    half = ((high - low) / 2).astype(np.float32)

    def to_unit(a):
        return (a.reshape(a.shape[0], -1) - mid) / half

    def from_unit(u):
        return u * half + mid

    return to_unit, from_unit


def squashed_gaussian(spec: sp.BoxSpec, eps: float = 1e-6) -> Distribution:
    """A tanh-squashed diagonal Gaussian over a bounded Box (SAC's and CQL's actor).

    `u ~ N(mean, std)`, `a = low + (tanh(u) + 1) / 2 * (high - low)`: sampled and greedy
    actions are env actions inside the bounds, so data actions need no rescaling. `logp` is
    the density of `tanh(u)` in the unit box (the tanh Jacobian included, the constant
    bounds scaling left out), the space SAC's target entropy `-dim` refers to. `entropy` is
    the base Gaussian's (the squashed one has no closed form).

    Args:
      spec: the bounded Box action space's spec.
      eps: keeps `log(1 - tanh(u)**2)` finite at the bounds.
    """
    to_unit, from_unit = action_scaler(spec)
    base = diag_gaussian(int(sp.flat_dim(spec)))
    shape = tuple(spec.shape)

    def split(inputs):
        mean, log_std = jnp.split(inputs, 2, axis=-1)
        return mean, jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)

    def unit_logp(u, t, mean, log_std):
        z = (u - mean) / jnp.exp(log_std)
        gauss = jnp.sum(-0.5 * z**2 - log_std - 0.5 * jnp.log(2 * jnp.pi), axis=-1)
        return gauss - jnp.sum(jnp.log(1.0 - t**2 + eps), axis=-1)

    def to_env(t):
        return from_unit(t).reshape(*t.shape[:-1], *shape)

    def logp(inputs, actions):
        mean, log_std = split(inputs)
        t = jnp.clip(to_unit(actions.reshape(mean.shape[0], -1)).reshape(mean.shape),
                     -1 + eps, 1 - eps)
        return unit_logp(jnp.arctanh(t), t, mean, log_std)

    def sample_and_logp(inputs, rng):
        mean, log_std = split(inputs)
        u = mean + jnp.exp(log_std) * jax.random.normal(rng, mean.shape)
        t = jnp.tanh(u)
        return to_env(t), unit_logp(u, t, mean, log_std)

    return Distribution(
        dist_dim=base.dist_dim, logp=logp,
        sample=lambda inputs, rng: sample_and_logp(inputs, rng)[0],
        greedy=lambda inputs: to_env(jnp.tanh(split(inputs)[0])),
        entropy=base.entropy, sample_and_logp=sample_and_logp, kind="squashed_gaussian")


def clipped_gaussian(spec: sp.BoxSpec) -> Distribution:
    """A diagonal Gaussian in [-1, 1] units mapped onto a bounded Box and clipped to it: what
    a PPO policy with `normalize_actions=True` acts with (RLlib's option: the network's
    outputs are read in [-1, 1] units, whatever the bounds).

    `action_dist_inputs` are `concat(mean, log_std)` in unit space; the env-space Gaussian is
    `N(mid + half * mean, half * std)` (`mid`, `half`: the bounds' centre and half-width),
    and an action is its draw clipped to the bounds, so a fresh network (outputs near 0)
    acts around the box's centre with a spread of about half its width. `logp` is the
    action's exact log-probability under that clipped Gaussian, per dimension: the
    Gaussian's log-density (env units) strictly inside the bounds and the log of the mass
    beyond a bound on it (Fujita and Maeda 2018, "Clipped Action Policy Gradient"), so
    actions recorded as the env got them (inside the box) carry the probability the policy
    gave them. `greedy` is the clipped mean, `entropy` the unclipped Gaussian's (env units).

    Args:
      spec: the bounded Box action space's spec.
    """
    spec = sp.to_spec(spec)
    low = np.asarray(spec.low, np.float32).reshape(-1)
    high = np.asarray(spec.high, np.float32).reshape(-1)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise ValueError(f"normalize_actions needs a bounded Box action space, got {spec}")
    mid, half = (high + low) / 2, (high - low) / 2
    base = diag_gaussian(low.size)
    shape = tuple(spec.shape)

    def env_gaussian(inputs):
        mean, log_std = jnp.split(inputs, 2, axis=-1)
        log_std = jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX) + jnp.log(half)
        return mid + half * mean, log_std

    def to_env(flat):
        return flat.reshape(*flat.shape[:-1], *shape)

    def logp(inputs, actions):
        mean, log_std = env_gaussian(inputs)
        a = actions.reshape(mean.shape)
        std = jnp.exp(log_std)
        density = -0.5 * ((a - mean) / std) ** 2 - log_std - 0.5 * jnp.log(2 * jnp.pi)
        below = log_ndtr((low - mean) / std)
        above = log_ndtr((mean - high) / std)
        per_dim = jnp.where(a <= low, below, jnp.where(a >= high, above, density))
        return jnp.sum(per_dim, axis=-1)

    def sample(inputs, rng):
        mean, log_std = env_gaussian(inputs)
        draw = mean + jnp.exp(log_std) * jax.random.normal(rng, mean.shape)
        return to_env(jnp.clip(draw, low, high))

    def entropy(inputs):
        _, log_std = env_gaussian(inputs)
        return jnp.sum(log_std + 0.5 * jnp.log(2 * jnp.pi * jnp.e), axis=-1)

    def sample_and_logp(inputs, rng):
        actions = sample(inputs, rng)
        return actions, logp(inputs, actions)

    return Distribution(
        dist_dim=base.dist_dim, logp=logp, sample=sample,
        greedy=lambda inputs: to_env(jnp.clip(env_gaussian(inputs)[0], low, high)),
        entropy=entropy, sample_and_logp=sample_and_logp, kind="clipped_gaussian")


def tanh_mean_gaussian(spec: sp.BoxSpec, log_std_min: float = -5.0,
                       log_std_max: float = 2.0) -> Distribution:
    """A Gaussian around `tanh(mean)` in the unit box (IQL's paper code and d3rlpy's IQL actor).

    `action_dist_inputs` are `concat(mean, log_std)`; the Gaussian `N(tanh(mean), std)` lives
    in the unit box, `log_std` clipped to `[log_std_min, log_std_max]`. Data actions are
    scaled to the unit box and clipped to it; `logp` is their plain Gaussian density there (no
    tanh Jacobian, the constant bounds scaling left out), so actions on the bounds cost what
    any other action does. Samples are clipped to the box; greedy is `tanh(mean)`.

    Args:
      spec: the bounded Box action space's spec.
      log_std_min: the smallest log-std.
      log_std_max: the largest log-std.
    """
    to_unit, from_unit = action_scaler(spec)
    base = diag_gaussian(int(sp.flat_dim(spec)))
    shape = tuple(spec.shape)

    def split(inputs):
        mean, log_std = jnp.split(inputs, 2, axis=-1)
        return jnp.tanh(mean), jnp.clip(log_std, log_std_min, log_std_max)

    def unit_logp(t, loc, log_std):
        z = (t - loc) / jnp.exp(log_std)
        return jnp.sum(-0.5 * z**2 - log_std - 0.5 * jnp.log(2 * jnp.pi), axis=-1)

    def to_env(t):
        return from_unit(t).reshape(*t.shape[:-1], *shape)

    def logp(inputs, actions):
        loc, log_std = split(inputs)
        t = jnp.clip(to_unit(actions.reshape(loc.shape[0], -1)).reshape(loc.shape), -1.0, 1.0)
        return unit_logp(t, loc, log_std)

    def sample_and_logp(inputs, rng):
        loc, log_std = split(inputs)
        t = jnp.clip(loc + jnp.exp(log_std) * jax.random.normal(rng, loc.shape), -1.0, 1.0)
        return to_env(t), unit_logp(t, loc, log_std)

    def entropy(inputs):
        return base.entropy(jnp.concatenate(split(inputs), axis=-1))

    return Distribution(
        dist_dim=base.dist_dim, logp=logp,
        sample=lambda inputs, rng: sample_and_logp(inputs, rng)[0],
        greedy=lambda inputs: to_env(split(inputs)[0]), entropy=entropy,
        sample_and_logp=sample_and_logp, kind="tanh_mean_gaussian")


def deterministic(spec: sp.BoxSpec) -> Distribution:
    """A deterministic bounded Box policy (TD3's actor): `action_dist_inputs` are the
    pre-tanh actions, `a = low + (tanh(x) + 1) / 2 * (high - low)`. Sampling is the greedy
    action; `logp` is 0 and `entropy` 0 (a point mass has no density to report).

    Args:
      spec: the bounded Box action space's spec.
    """
    _, from_unit = action_scaler(spec)
    shape = tuple(spec.shape)

    def greedy(inputs):
        return from_unit(jnp.tanh(inputs)).reshape(*inputs.shape[:-1], *shape)

    def zeros(inputs, *_):
        return jnp.zeros(inputs.shape[:-1])

    return Distribution(dist_dim=int(sp.flat_dim(spec)), logp=zeros,
                        sample=lambda inputs, rng: greedy(inputs), greedy=greedy,
                        entropy=zeros,
                        sample_and_logp=lambda inputs, rng: (greedy(inputs), zeros(inputs)),
                        kind="deterministic")


def for_space(spec: sp.SpaceSpec) -> Distribution:
    """The distribution RLlib's default model uses for an action space.

    Args:
      spec: the action space's spec (Discrete: categorical; Box: diagonal Gaussian).
    """
    if isinstance(spec, sp.DiscreteSpec):
        return categorical(spec.n, spec.start)
    if isinstance(spec, sp.BoxSpec):
        return diag_gaussian(int(sp.flat_dim(spec)))
    raise ValueError(f"no action distribution for {spec}: use Discrete or Box actions")
