"""The actor and the Q ensembles that the actor-critic offline algorithms (CQL, IQL) build
from a model config, each a pure function of the specs."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.errors import ConfigError
from rljax_offline.models.distributions import squashed_gaussian, tanh_mean_gaussian
from rljax_offline.models.module import policy_module
from rljax_offline.models.networks import (
    Network,
    continuous_q_network,
    discrete_q_network,
    ensemble,
)
from rljax_offline.models.policy import Policy, make_policy


def actor(obs_spec: Any, act_spec: Any, model_config: dict, *, squashed: bool = True
          ) -> Policy:
    """The policy network: categorical for Discrete actions; for Box actions a tanh-squashed
    Gaussian whose samples and greedy actions are env actions inside the bounds (SAC's actor,
    which RLlib's CQL and IQL use), or RLlib's plain Gaussian with `squashed=False`.

    Args:
      obs_spec: the observation space's spec.
      act_spec: the action space's spec.
      model_config: RLlib's model-config keys (`fcnet_hiddens`, `fcnet_activation`, `use_lstm`, ...,
        the initializer keys).
      squashed: Box actions: tanh-squashed (True) or RLlib's plain Gaussian.
    """
    policy = make_policy(obs_spec, act_spec, **model_config)
    if squashed and isinstance(act_spec, sp.BoxSpec):
        check_bounded(act_spec, "a tanh-squashed actor")
        policy = policy._replace(dist=squashed_gaussian(act_spec))
    return policy


def tanh_mean_actor(obs_spec: Any, act_spec: Any, model_config: dict, *,
                    log_std_min: float = -5.0, log_std_max: float = 2.0,
                    std_from_network: bool = False) -> Policy:
    """d3rlpy's `NormalPolicy`: a Gaussian around `tanh(mean(s))` in the unit box. Its log-std
    is one learned parameter per action dimension, not an output of the network (IQL's paper
    actor, d3rlpy's `use_std_parameter=True`): `log_std_min + sigmoid(w) * (log_std_max -
    log_std_min)`, `w` starting at 0 (log-std -1.5 at the defaults); params `{"net": the mean
    network's, "log_std": w}`. With `std_from_network` (d3rlpy's `use_std_parameter=False`,
    its CRR actor) the network's second half of outputs is the log-std, clipped to
    `[log_std_min, log_std_max]`; params `{"net": ...}`. Feed-forward only.

    Args:
      obs_spec: the observation space's spec.
      act_spec: the bounded Box action space's spec.
      model_config: RLlib's model-config keys (`fcnet_hiddens`, `fcnet_activation`, the
        initializer keys; not `use_lstm` / `use_gru`).
      log_std_min: the smallest log-std.
      log_std_max: the largest log-std.
      std_from_network: the log-std an output of the network rather than a parameter.
    """
    check_bounded(act_spec, "the tanh-mean Gaussian actor")
    if model_config.get("use_lstm") or model_config.get("use_gru"):
        raise ConfigError("the tanh-mean Gaussian actor is feed-forward only; unset "
                          "use_lstm / use_gru")
    net = make_policy(obs_spec, act_spec, **model_config)  # outputs concat(mean, log_std)
    dist = tanh_mean_gaussian(act_spec, log_std_min, log_std_max)
    dim = dist.dist_dim // 2

    def init(rng):
        if std_from_network:
            return {"net": net.init(rng)}
        return {"net": net.init(rng), "log_std": jnp.zeros((dim,), jnp.float32)}

    def apply(params, obs):
        out = net.apply(params["net"], obs)
        if std_from_network:  # the distribution clips it to [log_std_min, log_std_max]
            return out
        mean = out[..., :dim]
        log_std = log_std_min + jax.nn.sigmoid(params["log_std"]) * (log_std_max - log_std_min)
        return jnp.concatenate([mean, jnp.broadcast_to(log_std, mean.shape)], axis=-1)

    return policy_module(init, apply, dist, obs_spec=net.obs_spec, act_spec=net.act_spec)


def check_bounded(act_spec: sp.BoxSpec, what: str) -> None:
    """A named error for Box actions without finite bounds."""
    if not (np.all(np.isfinite(act_spec.low)) and np.all(np.isfinite(act_spec.high))):
        raise ConfigError(f"{what} needs a Box action space with finite bounds, got {act_spec}")


def q_ensemble(obs_spec: Any, act_spec: Any, model_config: dict, twin_q: bool) -> Network:
    """One or two independent Q networks applied together: `apply(params, obs[, actions])
    -> [k, N]` (Box: Q(s, a)) or `[k, N, n]` (Discrete: Q(s, .)); `steps` / `head` the same
    for learner batches, recurrent ones included (`models.networks`).

    Args:
      obs_spec: the observation space's spec.
      act_spec: the action space's spec.
      model_config: RLlib's model-config keys (`fcnet_hiddens`, `fcnet_activation`, `use_lstm`, ...,
        the initializer keys).
      twin_q: two Q networks (True) or one.
    """
    q = (discrete_q_network(obs_spec, act_spec, model_config)
         if isinstance(act_spec, sp.DiscreteSpec)
         else continuous_q_network(obs_spec, act_spec, model_config))
    return ensemble(q, 2 if twin_q else 1)
