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
    layernorm: str = ""  # "", "before_activation" or "after_activation" (`layernorm_mode`)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return dense_stack(x, self.hiddens, self.activation, self.inits, self.layernorm)


# LayerNorm's epsilon by placement: RLlib's in its MLPs (before the activation, chosen there to
# match TF's default); PyTorch's `nn.LayerNorm` default where d3rlpy and CORL put it (after).
LAYERNORM_PLACEMENTS = {"before_activation": 1e-3, "after_activation": 1e-5}


def layernorm_mode(model_config: dict) -> str:
    """Where a completed model config puts LayerNorm in its hidden layers: "" (none, RLlib's
    `fcnet_use_layernorm=False`), else its `fcnet_layernorm_placement`."""
    if not model_config.get("fcnet_use_layernorm"):
        return ""
    placement = model_config.get("fcnet_layernorm_placement", "before_activation")
    if placement not in LAYERNORM_PLACEMENTS:
        raise ValueError(f"model_config fcnet_layernorm_placement must be one of "
                         f"{sorted(LAYERNORM_PLACEMENTS)}, got {placement!r}")
    return placement


def dense_stack(x: jax.Array, hiddens: Sequence[int], activation: str,
                inits: LayerInits, layernorm: str = "") -> jax.Array:
    """`Dense(h)` then `activation` for each of `hiddens`, made in the calling module's scope
    (inside its compact `__call__`: the layers are its `Dense_0`, `Dense_1`, ...). With
    `layernorm` (`layernorm_mode`), a `LayerNorm` in each hidden layer: "before_activation"
    between the layer's output and its activation, as RLlib's MLPs (epsilon 1e-3);
    "after_activation" after it, as d3rlpy's and CORL's (epsilon 1e-5). The Dense layers keep
    their names."""
    act = ACTIVATIONS[activation]
    for h in hiddens:
        x = nn.Dense(h, **inits.hidden(x.shape[-1]))(x)
        if layernorm == "before_activation":
            x = nn.LayerNorm(epsilon=LAYERNORM_PLACEMENTS[layernorm])(x)
        x = act(x)
        if layernorm == "after_activation":
            x = nn.LayerNorm(epsilon=LAYERNORM_PLACEMENTS[layernorm])(x)
    return x


def head_init():
    """The small-scale init RLlib uses for the policy head's last layer (near-uniform start)."""
    return nn.initializers.variance_scaling(0.01, "fan_in", "truncated_normal")
