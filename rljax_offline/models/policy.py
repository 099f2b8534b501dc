"""The policy network: RLlib's default MLP encoder (`fcnet_hiddens`, `fcnet_activation`) and a
head that outputs `action_dist_inputs` for the action space's distribution."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from rljax_offline import spaces as sp
from rljax_offline.models.distributions import Distribution, for_space

ACTIVATIONS = {"relu": nn.relu, "tanh": nn.tanh, "swish": nn.swish, "silu": nn.silu,
               "elu": nn.elu, "linear": lambda x: x, None: lambda x: x}


class MLP(nn.Module):
    hiddens: Sequence[int]
    activation: str
    out_dim: int

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = obs.reshape(obs.shape[0], -1).astype(jnp.float32)
        act = ACTIVATIONS[self.activation]
        for h in self.hiddens:
            x = act(nn.Dense(h)(x))
        return nn.Dense(self.out_dim, kernel_init=nn.initializers.variance_scaling(
            0.01, "fan_in", "truncated_normal"))(x)


class Policy(NamedTuple):
    """`init(rng) -> params`, `apply(params, obs[N, ...]) -> action_dist_inputs[N, d]`,
    `dist`: the action distribution, `greedy_action`/`sample_action` for acting."""

    init: Any
    apply: Any
    dist: Distribution
    obs_spec: Any
    act_spec: Any

    def greedy_action(self, params, obs):
        return self.dist.greedy(self.apply(params, obs))

    def sample_action(self, params, obs, rng):
        return self.dist.sample(self.apply(params, obs), rng)


def make_policy(obs_spec: Any, act_spec: Any, fcnet_hiddens: Sequence[int] = (256, 256),
                fcnet_activation: str = "relu") -> Policy:
    """A policy for flat observations of `obs_spec` (connectors flatten/one-hot before it)."""
    obs_spec, act_spec = sp.to_spec(obs_spec), sp.to_spec(act_spec)
    if fcnet_activation not in ACTIVATIONS:
        raise ValueError(f"fcnet_activation must be one of {sorted(map(str, ACTIVATIONS))}, "
                         f"got {fcnet_activation!r}")
    if not isinstance(obs_spec, sp.BoxSpec):
        raise ValueError(f"the policy takes Box observations, got {obs_spec}; add the one-hot "
                         "or flatten connector in front of it")
    dist = for_space(act_spec)
    net = MLP(tuple(int(h) for h in fcnet_hiddens), fcnet_activation, dist.dist_dim)
    dummy = jnp.zeros((1, *obs_spec.shape), jnp.float32)
    return Policy(init=lambda rng: net.init(rng, dummy), apply=net.apply, dist=dist,
                  obs_spec=obs_spec, act_spec=act_spec)
