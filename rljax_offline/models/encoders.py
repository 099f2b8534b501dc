"""Feature encoders shared by the policy networks: RLlib's default MLP trunk (`fcnet_hiddens`)
and the observation encoding in front of it (one-hot for Discrete inputs)."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.models.initializers import LayerInits

ACTIVATIONS = {"relu": nn.relu, "tanh": nn.tanh, "swish": nn.swish, "silu": nn.silu,
               "elu": nn.elu, "linear": lambda x: x, None: lambda x: x}


def check_activation(name, key: str) -> None:
    if name not in ACTIVATIONS:
        raise ValueError(f"{key} must be one of {sorted(map(str, ACTIVATIONS))}, got {name!r}")


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


class MLPEncoder(nn.Module):
    """Dense layers of `hiddens` units, each followed by `activation`: `[N, d] -> [N, h_last]`
    (the identity for `hiddens=()`)."""

    hiddens: Sequence[int]
    activation: str
    inits: LayerInits = LayerInits()  # the hidden ones apply
    layernorm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return dense_stack(x, self.hiddens, self.activation, self.inits, self.layernorm)


# RLlib's LayerNorm epsilon in its MLPs (chosen there to match TF's default).
LAYERNORM_EPSILON = 1e-3


def dense_stack(x: jax.Array, hiddens: Sequence[int], activation: str,
                inits: LayerInits, layernorm: bool = False) -> jax.Array:
    """`Dense(h)` then `activation` for each of `hiddens`, made in the calling module's scope
    (inside its compact `__call__`: the layers are its `Dense_0`, `Dense_1`, ...). With
    `layernorm` (RLlib's `fcnet_use_layernorm`), a `LayerNorm` between each layer's output and
    its activation, as RLlib's MLPs (epsilon 1e-3); the Dense layers keep their names."""
    act = ACTIVATIONS[activation]
    for h in hiddens:
        x = nn.Dense(h, **inits.hidden(x.shape[-1]))(x)
        if layernorm:
            x = nn.LayerNorm(epsilon=LAYERNORM_EPSILON)(x)
        x = act(x)
    return x


def head_init():
    """The small-scale init RLlib uses for the policy head's last layer (near-uniform start)."""
    return nn.initializers.variance_scaling(0.01, "fan_in", "truncated_normal")
