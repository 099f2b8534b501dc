"""Value and Q networks for the learner core, built from the same model config as the policy
(RLlib's `fcnet_hiddens` / `fcnet_activation`) and the same observation encoding.

Each factory returns a `Network(init, apply)` of pure functions:
* `mlp_network`: `obs [N, ...] -> [N, out_dim]` (e.g. a deterministic actor);
* `value_network`: `obs [N, ...] -> V [N]`;
* `discrete_q_network`: `obs -> Q [N, n]` (one output per action, DQN style);
* `continuous_q_network`: `(obs, action) -> Q [N]` (the action concatenated to the encoded
  observation, SAC style); actions are scaled into [-1, 1] by the space's bounds first, so the
  network sees the same range whatever the env's units.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rljax_offline import spaces as sp
from rljax_offline.models.distributions import action_scaler
from rljax_offline.models.policy import MLP, check_model_config, encode_observations


class Network(NamedTuple):
    init: Callable[[jax.Array], Any]
    apply: Callable


def _mlp(model_config: dict, out_dim: int, final_scale: float = 1.0) -> MLP:
    mc = check_model_config(dict(model_config))
    return MLP(tuple(int(h) for h in mc["fcnet_hiddens"]), mc["fcnet_activation"], out_dim,
               final_scale)


def mlp_network(obs_spec: Any, out_dim: int, model_config: dict | None = None,
                final_scale: float = 1.0) -> Network:
    """An MLP on the encoded observation: `obs [N, ...] -> [N, out_dim]` (an actor head, or
    anything else an algorithm needs)."""
    obs_spec = sp.to_spec(obs_spec)
    net = _mlp(model_config or {}, int(out_dim), final_scale)
    dummy = jnp.zeros((1, sp.flat_dim(obs_spec)), jnp.float32)

    def apply(params, obs):
        return net.apply(params, encode_observations(obs_spec, jnp.asarray(obs)))

    return Network(init=lambda rng: net.init(rng, dummy), apply=apply)


def value_network(obs_spec: Any, model_config: dict | None = None) -> Network:
    """`V(s)`: an MLP on the encoded observation with one output, `[N]`."""
    mlp = mlp_network(obs_spec, 1, model_config)
    return Network(init=mlp.init, apply=lambda params, obs: mlp.apply(params, obs)[:, 0])


def discrete_q_network(obs_spec: Any, act_spec: Any, model_config: dict | None = None
                       ) -> Network:
    """`Q(s, .)`: an MLP on the encoded observation with one output per action."""
    obs_spec, act_spec = sp.to_spec(obs_spec), sp.to_spec(act_spec)
    if not isinstance(act_spec, sp.DiscreteSpec):
        raise ValueError(f"discrete_q_network needs Discrete actions, got {act_spec}")
    net = _mlp(model_config or {}, act_spec.n)
    dummy = jnp.zeros((1, sp.flat_dim(obs_spec)), jnp.float32)

    def apply(params, obs):
        return net.apply(params, encode_observations(obs_spec, jnp.asarray(obs)))

    return Network(init=lambda rng: net.init(rng, dummy), apply=apply)


def continuous_q_network(obs_spec: Any, act_spec: Any, model_config: dict | None = None
                         ) -> Network:
    """`Q(s, a)` for Box actions: an MLP on `concat(encoded obs, action in [-1, 1])`."""
    obs_spec, act_spec = sp.to_spec(obs_spec), sp.to_spec(act_spec)
    if not isinstance(act_spec, sp.BoxSpec):
        raise ValueError(f"continuous_q_network needs Box actions, got {act_spec}")
    to_unit, _ = action_scaler(act_spec)
    net = _mlp(model_config or {}, 1)
    dummy = jnp.zeros((1, sp.flat_dim(obs_spec) + sp.flat_dim(act_spec)), jnp.float32)

    def apply(params, obs, actions):
        x = jnp.concatenate([encode_observations(obs_spec, jnp.asarray(obs)),
                             to_unit(jnp.asarray(actions, jnp.float32))], axis=-1)
        return net.apply(params, x)[:, 0]

    return Network(init=lambda rng: net.init(rng, dummy), apply=apply)


def ensemble(network: Network, n: int) -> Network:
    """`n` independent copies of `network` (twin Q: n=2), applied together:
    `apply(params, *args) -> [n, ...]`."""

    def init(rng):
        return jax.vmap(network.init)(jax.random.split(rng, n))

    def apply(params, *args):
        return jax.vmap(lambda p: network.apply(p, *args))(params)

    return Network(init=init, apply=apply)
