"""The policy network: RLlib's default MLP encoder (`fcnet_hiddens`, `fcnet_activation`) and a
head that outputs `action_dist_inputs` for the action space's distribution.

Observations: Box observations are flattened; Discrete observations are one-hot encoded and
MultiDiscrete ones one-hot per component (as RLlib's default models do), MultiBinary ones used
as floats. Nested (Tuple/Dict) observations go through the flatten connector first.

Actions: logits of a categorical for Discrete actions; for Box actions a diagonal Gaussian whose
`action_dist_inputs` are `concat([mean, log_std])`, both outputs of the network, so the
log-std is state-dependent (RLlib's default, `free_log_std=False`). `clip_to_bounds` clips Box
actions into the space (what module-to-env's `clip_actions` does for the env).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.models.distributions import Distribution, for_space

# RLlib's model-config keys this package understands, with their defaults. `make_policy` and
# the configs' `rl_module(model_config=...)` validate against this one table.
MODEL_CONFIG_DEFAULTS: dict = {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"}

ACTIVATIONS = {"relu": nn.relu, "tanh": nn.tanh, "swish": nn.swish, "silu": nn.silu,
               "elu": nn.elu, "linear": lambda x: x, None: lambda x: x}


def encode_observations(obs_spec: sp.SpaceSpec, obs: jax.Array) -> jax.Array:
    """`[N, ...]` observations of `obs_spec` as float32 `[N, flat_dim]` network inputs."""
    if isinstance(obs_spec, sp.DiscreteSpec):
        return jax.nn.one_hot(obs.reshape(obs.shape[0]) - obs_spec.start, obs_spec.n)
    if isinstance(obs_spec, sp.MultiDiscreteSpec):
        flat = obs.reshape(obs.shape[0], -1)
        start = np.asarray(obs_spec.start or 0).reshape(-1) * np.ones(flat.shape[1], int)
        nvec = np.asarray(obs_spec.nvec).reshape(-1)
        return jnp.concatenate([jax.nn.one_hot(flat[:, i] - start[i], int(n))
                                for i, n in enumerate(nvec)], axis=-1)
    return obs.reshape(obs.shape[0], -1).astype(jnp.float32)


class MLP(nn.Module):
    """Dense layers with `activation`, then a linear output layer whose initial weights are
    scaled by `final_scale` (0.01 for policy heads: near-uniform initial actions)."""

    hiddens: Sequence[int]
    activation: str
    out_dim: int
    final_scale: float = 1.0

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        for h in self.hiddens:
            x = act(nn.Dense(h)(x))
        return nn.Dense(self.out_dim, kernel_init=nn.initializers.variance_scaling(
            self.final_scale, "fan_in", "truncated_normal"))(x)


class Policy(NamedTuple):
    """`init(rng) -> params`, `apply(params, obs[N, ...]) -> action_dist_inputs[N, d]`,
    `dist`: the action distribution, `greedy_action`/`sample_action` for acting."""

    init: Any
    apply: Any
    dist: Distribution
    obs_spec: Any
    act_spec: Any

    def dist_inputs(self, params, batch: dict) -> jax.Array:
        """`action_dist_inputs` for a learner batch (reads `obs`; what losses call, so that
        models needing more columns, e.g. recurrent state, read them here)."""
        return self.apply(params, batch["obs"])

    def logp(self, params, obs, actions):
        return self.dist.logp(self.apply(params, obs), actions)

    def entropy(self, params, obs):
        return self.dist.entropy(self.apply(params, obs))

    def greedy_action(self, params, obs):
        return self.dist.greedy(self.apply(params, obs))

    def sample_action(self, params, obs, rng):
        return self.dist.sample(self.apply(params, obs), rng)


def clip_to_bounds(act_spec: Any, actions: jax.Array) -> jax.Array:
    """Box actions `[N, ...]` clipped into the space's bounds; other spaces unchanged."""
    act_spec = sp.to_spec(act_spec)
    if not isinstance(act_spec, sp.BoxSpec):
        return actions
    low = np.asarray(act_spec.low, np.float32).reshape(act_spec.shape)
    high = np.asarray(act_spec.high, np.float32).reshape(act_spec.shape)
    return jnp.clip(actions.reshape(actions.shape[0], *act_spec.shape), low, high)


def check_model_config(model_config: dict) -> dict:
    """`model_config` completed with the defaults; unknown keys are a named error."""
    unknown = set(model_config) - set(MODEL_CONFIG_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown model_config keys {sorted(unknown)}; supported: "
                         f"{sorted(MODEL_CONFIG_DEFAULTS)}")
    return {**MODEL_CONFIG_DEFAULTS, **model_config}


def make_policy(obs_spec: Any, act_spec: Any, fcnet_hiddens: Sequence[int] = (256, 256),
                fcnet_activation: str = "relu") -> Policy:
    """A policy for observations of `obs_spec` (Box, Discrete, MultiDiscrete, MultiBinary;
    nested spaces need the flatten connector in front) and actions of `act_spec`.
    The keyword arguments are RLlib's model-config keys (`MODEL_CONFIG_DEFAULTS`)."""
    obs_spec, act_spec = sp.to_spec(obs_spec), sp.to_spec(act_spec)
    if fcnet_activation not in ACTIVATIONS:
        raise ValueError(f"fcnet_activation must be one of {sorted(map(str, ACTIVATIONS))}, "
                         f"got {fcnet_activation!r}")
    if isinstance(obs_spec, (sp.TupleSpec, sp.DictSpec)):
        raise ValueError(f"the policy takes flat observations, got {obs_spec}; add the "
                         "flatten connector in front of it")
    dist = for_space(act_spec)
    net = MLP(tuple(int(h) for h in fcnet_hiddens), fcnet_activation, dist.dist_dim, 0.01)
    dummy = jnp.zeros((1, sp.flat_dim(obs_spec)), jnp.float32)

    def apply(params, obs):
        return net.apply(params, encode_observations(obs_spec, jnp.asarray(obs)))

    return Policy(init=lambda rng: net.init(rng, dummy), apply=apply, dist=dist,
                  obs_spec=obs_spec, act_spec=act_spec)
