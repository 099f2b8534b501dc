"""Action distributions from `action_dist_inputs` (RLlib's layout): categorical logits for
Discrete actions, `concat([mean, log_std])` of a diagonal Gaussian for Box actions."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from rljax_offline import spaces as sp

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


class Distribution(NamedTuple):
    """Pure functions of `action_dist_inputs` ([..., dist_dim])."""

    dist_dim: int
    logp: callable        # (inputs, actions) -> [...]
    sample: callable      # (inputs, rng) -> actions
    greedy: callable      # inputs -> actions (argmax / mean)
    entropy: callable     # inputs -> [...]


def categorical(n: int, start: int = 0) -> Distribution:
    """Categorical over the env's action values `start, ..., start + n - 1` (gymnasium's
    `Discrete(n, start=s)`): `logp` takes, and `sample`/`greedy` return, those values; logit
    `i` belongs to action `start + i`. Out-of-range actions get log-probability -inf."""

    def logp(inputs, actions):
        logits = jax.nn.log_softmax(inputs, axis=-1)
        index = actions.astype(jnp.int32) - start
        valid = (index >= 0) & (index < n)
        picked = jnp.take_along_axis(logits, jnp.clip(index, 0, n - 1)[..., None], -1)[..., 0]
        return jnp.where(valid, picked, -jnp.inf)

    def entropy(inputs):
        logp_all = jax.nn.log_softmax(inputs, axis=-1)
        return -jnp.sum(jnp.exp(logp_all) * logp_all, axis=-1)

    return Distribution(
        dist_dim=n, logp=logp,
        sample=lambda inputs, rng: jax.random.categorical(rng, inputs, axis=-1) + start,
        greedy=lambda inputs: jnp.argmax(inputs, axis=-1) + start, entropy=entropy)


def diag_gaussian(dim: int) -> Distribution:
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

    return Distribution(dist_dim=2 * dim, logp=logp, sample=sample,
                        greedy=lambda inputs: split(inputs)[0], entropy=entropy)


def for_space(spec: sp.SpaceSpec) -> Distribution:
    """The distribution RLlib's default model uses for an action space."""
    if isinstance(spec, sp.DiscreteSpec):
        return categorical(spec.n, spec.start)
    if isinstance(spec, sp.BoxSpec):
        return diag_gaussian(int(sp.flat_dim(spec)))
    raise ValueError(f"no action distribution for {spec}: use Discrete or Box actions")
