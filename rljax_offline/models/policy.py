"""The policy network: RLlib's default MLP encoder (`fcnet_hiddens`, `fcnet_activation`) and a
head that outputs `action_dist_inputs` for the action space's distribution.

Observations: Box observations are flattened; Discrete observations are one-hot encoded and
MultiDiscrete ones one-hot per component (as RLlib's default models do), MultiBinary ones used
as floats. Nested (Tuple/Dict) observations go through the flatten connector first.

Actions: logits of a categorical for Discrete actions; for Box actions a diagonal Gaussian whose
`action_dist_inputs` are `concat([mean, log_std])`, both outputs of the network, so the
log-std is state-dependent (RLlib's default, `free_log_std=False`). `clip_to_bounds` clips Box
actions into the space (what module-to-env's `clip_actions` does for the env).

Images: a Box of rank 3 goes through RLlib's default CNN (`conv_filters`, `conv_activation`,
see `models/cnn.py`), uint8 frames scaled on the device; then the head.

Recurrent policies (`use_lstm=True` or `use_gru=True`, see `models/recurrent.py`):
`policy.is_stateful` is True and

* `policy.initial_state(batch_size=None)`: the zero state, `{"h": [cell], "c": [cell]}`
  (`[batch_size, cell]` with a batch size); give it to the connector pipelines
  (`default_env_to_module` / `default_learner(..., max_seq_len=policy.max_seq_len,
  initial_state=policy.initial_state())`).
* `policy.forward(params, batch) -> (action_dist_inputs [B, T, d], state_out)`: reads `obs`
  `[B, T, ...]`, `state_in` and `seq_lens` (what both pipelines build). Acting: the env-to-module
  batch has `T = 1`; drop the time axis of the outputs and record `state_out` per step as an
  extra model output (`acting.actor.make_actor` does both).
* `policy.dist_inputs(params, batch)`: `forward(...)[0]`, shaped like `batch["actions"]`'s
  leading `[B, T]` dims, so mask-weighted losses over `loss_mask` `[B, T]` work unchanged.
* `policy.apply(params, obs)` needs a state and raises for them.
Previous actions / rewards (`lstm_use_prev_action`, `lstm_use_prev_reward`) enter as
observations, as in RLlib: put `connectors.prev_actions_rewards()` in front of both pipelines
(`connectors.model_connectors(model_config)` gives the pieces) and build the policy from the
pipeline's `out_spaces`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.models import cnn, recurrent
from rljax_offline.models.distributions import for_space
from rljax_offline.models.encoders import (
    MLPEncoder,
    check_activation,
    dense_stack,
    encode_observations,
    head_init,
    layernorm_mode,
)
from rljax_offline.models.initializers import LayerInits, layer_inits
from rljax_offline.models.model_config import (  # noqa: F401 - re-exported: callers' name
    MODEL_CONFIG_DEFAULTS,
    check_model_config,
)
from rljax_offline.models.module import Module, policy_module


class MLP(nn.Module):
    """Dense layers with `activation`, then a linear output layer whose initial weights are
    scaled by `final_scale` (0.01 for policy heads: near-uniform initial actions), unless
    `inits` (the model config's initializers, `models.initializers`) says otherwise."""

    hiddens: Sequence[int]
    activation: str
    out_dim: int
    final_scale: float = 1.0
    inits: LayerInits = LayerInits()
    layernorm: str = ""  # encoders.layernorm_mode of the model config (hidden layers only)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = dense_stack(x, self.hiddens, self.activation, self.inits, self.layernorm)
        scaled = nn.initializers.variance_scaling(self.final_scale, "fan_in", "truncated_normal")
        return nn.Dense(self.out_dim, **self.inits.head(x.shape[-1], scaled))(x)


Policy = Module  # a policy is a `Module` with a `dist` (the name call sites annotate with)


class ObservationEncoder(nn.Module):
    """Encoded observations -> features: the CNN for images (`conv_filters` set), otherwise
    the MLP trunk of `fcnet_hiddens` over flat (one-hot for Discrete) inputs."""

    obs_spec: Any
    hiddens: tuple
    activation: str
    conv_filters: tuple | None = None
    conv_activation: str = "relu"
    inits: LayerInits = LayerInits()  # the MLP's hidden ones apply
    layernorm: str = ""

    @nn.compact
    def __call__(self, obs):
        if self.conv_filters is not None:
            return cnn.CNNEncoder(self.conv_filters, self.conv_activation)(obs)
        return MLPEncoder(self.hiddens, self.activation, self.inits, self.layernorm)(
            encode_observations(self.obs_spec, obs))


class EncoderHead(nn.Module):
    """A feed-forward policy on a given encoder: features -> `action_dist_inputs`."""

    encoder: nn.Module
    out_dim: int
    inits: LayerInits = LayerInits()  # the head ones apply

    @nn.compact
    def __call__(self, obs):
        x = self.encoder(obs)
        return nn.Dense(self.out_dim, **self.inits.head(x.shape[-1], head_init()))(x)


def clip_to_bounds(act_spec: Any, actions: jax.Array) -> jax.Array:
    """Box actions `[N, ...]` clipped into the space's bounds; other spaces unchanged."""
    act_spec = sp.to_spec(act_spec)
    if not isinstance(act_spec, sp.BoxSpec):
        return actions
    low = np.asarray(act_spec.low, np.float32).reshape(act_spec.shape)
    high = np.asarray(act_spec.high, np.float32).reshape(act_spec.shape)
    return jnp.clip(actions.reshape(actions.shape[0], *act_spec.shape), low, high)


def make_policy(obs_spec: Any, act_spec: Any, fcnet_hiddens: Sequence[int] = (256, 256),
                fcnet_activation: str = "relu", **model_config) -> Policy:
    """A policy for observations of `obs_spec` (Box, Discrete, MultiDiscrete, MultiBinary;
    nested spaces need the flatten connector in front) and actions of `act_spec`.
    The keyword arguments are RLlib's model-config keys (`MODEL_CONFIG_DEFAULTS`): an MLP by
    default, a CNN for rank-3 Box observations, an LSTM/GRU with `use_lstm` / `use_gru`.

    Args:
      obs_spec: the observation space (or its spec).
      act_spec: the action space (or its spec).
      fcnet_hiddens: the MLP's hidden layer sizes.
      fcnet_activation: their activation ("relu", "tanh", ...).
      **model_config: any other model-config key (`use_lstm`, `lstm_cell_size`, `max_seq_len`,
        `conv_filters`, the initializer keys, ...).
    """
    cfg = check_model_config({**model_config, "fcnet_hiddens": fcnet_hiddens,
                              "fcnet_activation": fcnet_activation})
    obs_spec, act_spec = sp.to_spec(obs_spec), sp.to_spec(act_spec)
    check_activation(cfg["fcnet_activation"], "fcnet_activation")
    check_activation(cfg["conv_activation"], "conv_activation")
    if isinstance(obs_spec, (sp.TupleSpec, sp.DictSpec)):
        raise ValueError(f"the policy takes flat observations, got {obs_spec}; add the "
                         "flatten connector in front of it")
    if cfg["use_lstm"] and cfg["use_gru"]:
        raise ValueError("model_config: use_lstm and use_gru are exclusive")
    dist = for_space(act_spec)
    hiddens = tuple(int(h) for h in cfg["fcnet_hiddens"])
    image = isinstance(obs_spec, sp.BoxSpec) and cnn.is_image(obs_spec.shape)
    encoder, obs_shape, obs_dtype = observation_encoder(obs_spec, cfg)
    if cfg["use_lstm"] or cfg["use_gru"]:
        return _recurrent_policy(encoder, dist, obs_spec, act_spec, obs_shape, obs_dtype, cfg)

    inits = layer_inits(cfg)
    net = EncoderHead(encoder, dist.dist_dim, inits) if image else MLP(
        hiddens, cfg["fcnet_activation"], dist.dist_dim, 0.01, inits,
        layernorm_mode(cfg))
    dummy = np.zeros((1, *obs_shape), obs_dtype)  # numpy: no eager programs to compile
    prepare = (lambda obs: jnp.asarray(obs)) if image else (
        lambda obs: encode_observations(obs_spec, jnp.asarray(obs)))

    def apply(params, obs):
        return net.apply(params, prepare(obs))

    return policy_module(lambda rng: net.init(rng, dummy), apply, dist, obs_spec=obs_spec,
                         act_spec=act_spec)


def observation_encoder(obs_spec: Any, cfg: dict) -> tuple[nn.Module, tuple, Any]:
    """The encoder a model config asks for (`ObservationEncoder`: the CNN for rank-3 Box
    observations, else the MLP of `fcnet_hiddens`), with the shape and dtype of the raw
    observations it takes (for `init`)."""
    obs_spec = sp.to_spec(obs_spec)
    if isinstance(obs_spec, sp.BoxSpec) and cnn.is_image(obs_spec.shape):
        filters = cnn.check_conv_filters(cfg["conv_filters"] if cfg["conv_filters"] is not None
                                         else cnn.default_conv_filters(obs_spec.shape))
        obs_shape, obs_dtype = tuple(obs_spec.shape), jnp.dtype(obs_spec.dtype)
    else:
        filters, obs_shape, obs_dtype = None, (sp.flat_dim(obs_spec),), jnp.float32
    encoder = ObservationEncoder(obs_spec, tuple(int(h) for h in cfg["fcnet_hiddens"]),
                                 cfg["fcnet_activation"], filters, cfg["conv_activation"],
                                 layer_inits(cfg), layernorm_mode(cfg))
    return encoder, obs_shape, obs_dtype


def recurrent_cell(cfg: dict) -> tuple[str, int, int]:
    """`(cell_type, lstm_cell_size, max_seq_len)` of a recurrent model config, checked."""
    cell_type = "lstm" if cfg["use_lstm"] else "gru"
    cell_size, max_seq_len = int(cfg["lstm_cell_size"]), int(cfg["max_seq_len"])
    if cell_size < 1 or max_seq_len < 1:
        raise ValueError(f"lstm_cell_size and max_seq_len must be >= 1, got {cell_size}, "
                         f"{max_seq_len}")
    return cell_type, cell_size, max_seq_len


def is_recurrent(model_config: dict) -> bool:
    """Whether a model config asks for a recurrent module (`use_lstm` or `use_gru`).

    Args:
      model_config: a model config.
    """
    return bool(model_config.get("use_lstm") or model_config.get("use_gru"))


def _recurrent_policy(encoder, dist, obs_spec, act_spec, obs_shape, obs_dtype, cfg) -> Policy:
    cell_type, cell_size, max_seq_len = recurrent_cell(cfg)
    net = recurrent.RecurrentNet(encoder, cell_type, cell_size, dist.dist_dim, layer_inits(cfg))

    def forward(params, batch):
        obs = jnp.asarray(batch["obs"])
        if "state_in" not in batch:
            raise KeyError("a recurrent policy needs 'state_in' in the batch: build it with "
                           "the connector pipelines' max_seq_len and initial_state")
        return net.apply(params, obs, batch["state_in"], recurrent.seq_lens_or_full(batch))

    def apply(params, obs):
        raise TypeError("a recurrent policy needs a state: call policy.forward(params, batch) "
                        "with 'obs' [B, T, ...], 'state_in' and 'seq_lens'")

    return policy_module(
        lambda rng: net.init(rng, *recurrent.dummy_inputs(cell_type, cell_size, obs_shape,
                                                            obs_dtype)),
        apply, dist, obs_spec=obs_spec, act_spec=act_spec, forward=forward,
        initial_state=lambda batch_size=None: recurrent.initial_state(cell_type, cell_size,
                                                                      batch_size),
        max_seq_len=max_seq_len)
