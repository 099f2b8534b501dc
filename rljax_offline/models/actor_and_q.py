"""The actor and the Q ensembles that the actor-critic offline algorithms (CQL, IQL) build
from a model config, each a pure function of the specs."""

from __future__ import annotations

from typing import Any

import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.errors import ConfigError
from rljax_offline.models.distributions import squashed_gaussian
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
