"""Value and Q networks for the learner core, built from the same model config as the policy
(RLlib's `fcnet_hiddens` / `fcnet_activation`, and `use_lstm` / `use_gru` /
`lstm_cell_size`) and the same observation encoding.

Every network is a `models.module.Module`, a trunk (`steps`) and a head, so the learners have
one code path for feed-forward and recurrent networks alike:

* `steps(params, batch, with_next=False, state_in=None)`: the trunk's features at every
  timestep of a learner batch as rows `[N, F]` (and at the next observations), see
  `recurrent.step_outputs`. Feed-forward: the encoded observation (no parameters) of each
  flat row. Recurrent: the encoder (MLP, or the CNN for images) and one LSTM/GRU layer over
  each `[B, T]` sequence, from `state_in` (default: the network's own initial state, zeros).
* `head(params, features [N, F], *args) -> [N, ...]`: the rest. Feed-forward: the MLP of
  `fcnet_hiddens`; recurrent: a linear layer (a hidden layer of `lstm_cell_size` first when an
  action is an input).
* `apply(params, obs [N, ...], *args)`: `head(features(obs))`, feed-forward networks only.

The factories:
* `mlp_network`: `obs [N, ...] -> [N, out_dim]` (e.g. a deterministic actor);
* `value_network`: `obs [N, ...] -> V [N]`;
* `discrete_q_network`: `obs -> Q [N, n]` (one output per action, DQN style);
* `continuous_q_network`: `(obs, action) -> Q [N]` (the action concatenated to the features,
  SAC style; a recurrent Q summarises the observation history, the action enters the head, so
  Q of many candidate actions costs one unroll); actions are scaled into [-1, 1] by the
  space's bounds first, so the network sees the same range whatever the env's units.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.models import recurrent
from rljax_offline.models.distributions import action_scaler
from rljax_offline.models.encoders import layernorm_mode
from rljax_offline.models.initializers import layer_inits
from rljax_offline.models.module import Module
from rljax_offline.models.policy import (
    MLP,
    check_model_config,
    encode_observations,
    is_recurrent,
    observation_encoder,
    recurrent_cell,
)

Network = Module  # value and Q networks are `Module`s (the name their callers annotate with)


def _network(obs_spec: Any, out_dim: int, model_config: dict | None, *,
             action_spec: Any = None, final_scale: float = 1.0,
             squeeze: bool = False) -> Network:
    """The one builder behind every factory: `out_dim` outputs (squeezed to `[N]` when
    `squeeze`), an action input in [-1, 1] where `action_spec` is given."""
    mc = check_model_config(dict(model_config or {}))
    obs_spec = sp.to_spec(obs_spec)
    to_unit = action_scaler(action_spec)[0] if action_spec is not None else None
    act_dim = sp.flat_dim(action_spec) if action_spec is not None else 0

    def head_inputs(features, args):
        if to_unit is None:
            return features
        (actions,) = args
        return jnp.concatenate([features, to_unit(jnp.asarray(actions, jnp.float32))], axis=-1)

    def finish(y):
        return y[:, 0] if squeeze else y

    if not is_recurrent(mc):
        net = MLP(tuple(int(h) for h in mc["fcnet_hiddens"]), mc["fcnet_activation"],
                  int(out_dim), final_scale, layer_inits(mc), layernorm_mode(mc))
        dummy = np.zeros((1, sp.flat_dim(obs_spec) + act_dim), np.float32)  # no program

        def features(params, obs):
            return encode_observations(obs_spec, jnp.asarray(obs))

        def head(params, x, *args):
            return finish(net.apply(params, head_inputs(x, args)))

        def steps(params, batch, with_next=False, state_in=None):
            return recurrent.step_outputs(features, None, params, batch, None, with_next)

        return Module(init=lambda rng: net.init(rng, dummy),
                       apply=lambda params, obs, *args: head(params, features(params, obs),
                                                             *args),
                       steps=steps, head=head)

    cell_type, cell_size, _ = recurrent_cell(mc)
    encoder, obs_shape, obs_dtype = observation_encoder(obs_spec, mc)
    trunk = recurrent.RecurrentNet(encoder, cell_type, cell_size, None)
    head_net = MLP((cell_size,) if act_dim else (), mc["fcnet_activation"], int(out_dim),
                   final_scale, layer_inits(mc))

    def initial_state(batch_size=None):
        return recurrent.initial_state(cell_type, cell_size, batch_size)

    def init(rng):
        k1, k2 = jax.random.split(rng)
        return {"trunk": trunk.init(k1, *recurrent.dummy_inputs(cell_type, cell_size,
                                                                obs_shape, obs_dtype)),
                "head": head_net.init(k2, np.zeros((1, cell_size + act_dim), np.float32))}

    def forward(params, seq):
        return trunk.apply(params["trunk"], jnp.asarray(seq["obs"]), seq["state_in"],
                           recurrent.seq_lens_or_full(seq))

    def head(params, x, *args):
        return finish(head_net.apply(params["head"], head_inputs(x, args)))

    def steps(params, batch, with_next=False, state_in=None):
        if state_in is None:
            rows = jax.tree_util.tree_leaves(batch["obs"])[0].shape[0]
            state_in = initial_state(rows)
        return recurrent.step_outputs(None, forward, params, batch, state_in, with_next)

    def apply(params, obs, *args):
        raise TypeError("a recurrent network needs sequences and a state: use "
                        "network.steps(params, batch) and network.head")

    return Module(init=init, apply=apply, steps=steps, head=head, forward=forward,
                   initial_state=initial_state)


def mlp_network(obs_spec: Any, out_dim: int, model_config: dict | None = None,
                final_scale: float = 1.0) -> Network:
    """`obs [N, ...] -> [N, out_dim]` (an actor head, or anything else an algorithm needs).

    Args:
      obs_spec: the observation space's spec.
      out_dim: the output width.
      model_config: RLlib's model-config keys (`fcnet_hiddens`, `fcnet_activation`, `use_lstm`, ...,
        the initializer keys); None: the defaults.
      final_scale: the scale of the output layer's initial weights (0.01 for policy heads).
    """
    return _network(obs_spec, out_dim, model_config, final_scale=final_scale)


def value_network(obs_spec: Any, model_config: dict | None = None) -> Network:
    """`V(s)`, one output, `[N]`.

    Args:
      obs_spec: the observation space's spec.
      model_config: RLlib's model-config keys (`fcnet_hiddens`, `fcnet_activation`, `use_lstm`, ...,
        the initializer keys); None: the defaults.
    """
    return _network(obs_spec, 1, model_config, squeeze=True)


def discrete_q_network(obs_spec: Any, act_spec: Any, model_config: dict | None = None
                       ) -> Network:
    """`Q(s, .)`: one output per action.

    Args:
      obs_spec: the observation space's spec.
      act_spec: the Discrete action space's spec.
      model_config: RLlib's model-config keys (`fcnet_hiddens`, `fcnet_activation`, `use_lstm`, ...,
        the initializer keys); None: the defaults.
    """
    act_spec = sp.to_spec(act_spec)
    if not isinstance(act_spec, sp.DiscreteSpec):
        raise ValueError(f"discrete_q_network needs Discrete actions, got {act_spec}")
    return _network(obs_spec, act_spec.n, model_config)


def continuous_q_network(obs_spec: Any, act_spec: Any, model_config: dict | None = None
                         ) -> Network:
    """`Q(s, a)` for Box actions: the action in [-1, 1] concatenated to the features.

    Args:
      obs_spec: the observation space's spec.
      act_spec: the Box action space's spec (its bounds scale the action).
      model_config: RLlib's model-config keys (`fcnet_hiddens`, `fcnet_activation`, `use_lstm`, ...,
        the initializer keys); None: the defaults.
    """
    act_spec = sp.to_spec(act_spec)
    if not isinstance(act_spec, sp.BoxSpec):
        raise ValueError(f"continuous_q_network needs Box actions, got {act_spec}")
    return _network(obs_spec, 1, model_config, action_spec=act_spec, squeeze=True)


def ensemble(network: Network, n: int) -> Network:
    """`n` independent copies of `network` (twin Q: n=2), applied together: outputs and
    features get a leading `[n]` axis; a recurrent ensemble's state is `[..., n, cell]` per
    item (`[B, n, cell]` for a batch), so it rides in `state_in` like any state.

    Args:
      network: the network to copy.
      n: how many copies.
    """

    def init(rng):
        return jax.vmap(network.init)(jax.random.split(rng, n))

    def apply(params, *args):
        return jax.vmap(lambda p: network.apply(p, *args))(params)

    def head(params, features, *args):
        return jax.vmap(lambda p, x: network.head(p, x, *args))(params, features)

    def steps(params, batch, with_next=False, state_in=None):
        if state_in is None:
            return jax.vmap(lambda p: network.steps(p, batch, with_next))(params)
        return jax.vmap(lambda p, s: network.steps(p, batch, with_next, s),
                        in_axes=(0, 1))(params, state_in)

    if not network.is_stateful:
        return Module(init=init, apply=apply, steps=steps, head=head)

    def forward(params, seq):
        return jax.vmap(lambda p, s: network.forward(p, {**seq, "state_in": s}),
                        in_axes=(0, 1), out_axes=(0, 1))(params, seq["state_in"])

    def initial_state(batch_size=None):
        axis = 0 if batch_size is None else 1
        return jax.tree_util.tree_map(lambda x: jnp.stack([x] * n, axis=axis),
                                      network.initial_state(batch_size))

    return Module(init=init, apply=apply, steps=steps, head=head, forward=forward,
                   initial_state=initial_state)
