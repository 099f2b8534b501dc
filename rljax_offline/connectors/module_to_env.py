"""Module-to-env pieces: actions from `action_dist_inputs`, then clipped or unsquashed into the
action space for the env (RLlib's `GetActions`, `NormalizeAndClipActions`)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.connectors.core import Connector, Spaces, pipeline, stateless
from rljax_offline.models.distributions import for_space


def get_actions(distribution=None, clip: bool = True) -> Connector:
    """`actions` sampled (`ctx.explore` True, needs `ctx.rng`) or greedy (argmax / mean) from
    `action_dist_inputs`, and their `action_logp`. `distribution`: the module's action
    distribution (default: RLlib's for the action space: categorical / diagonal Gaussian).

    With `clip`, Box actions are clipped into the space's bounds before their log-probability
    is taken: the env runs the clipped action and the runner records it, so `action_logp` is
    the recorded action's and PPO's first ratio on it is exactly 1 (the unclipped draw's
    log-probability differs on a bound). RLlib records the unclipped draw instead,
    which leaves the recorded data outside the space; a distribution that already acts inside
    the bounds (squashed, clipped) is unchanged by it.

    Args:
      distribution: the module's action distribution (default: the space's).
      clip: clip Box actions into the bounds before taking their log-probability.

    Returns:
      The stateless piece.
    """

    def apply(episodes, batch, ctx):
        if "action_dist_inputs" not in batch:
            raise KeyError("get_actions needs 'action_dist_inputs' from the module")
        spec = episodes.action_space_spec
        dist = distribution or for_space(spec)
        inputs = batch["action_dist_inputs"]
        greedy = dist.greedy(inputs)
        if ctx.rng is not None and ctx.explore is not False:  # a Python False: no sampling
            sampled = dist.sample(inputs, ctx.rng)
            explore = jnp.asarray(ctx.explore, bool)
            actions = jnp.where(explore.reshape((1,) * greedy.ndim), sampled, greedy)
        else:
            actions = greedy
        if clip and isinstance(spec, sp.BoxSpec):
            low, high = _box_bounds(spec)
            actions = jnp.clip(actions.reshape(actions.shape[0], *spec.shape), low,
                               high).reshape(actions.shape)
        return episodes, {**batch, "actions": actions,
                          "action_logp": dist.logp(inputs, actions)}

    return stateless(apply)


def _box_bounds(spec: sp.BoxSpec) -> tuple[jnp.ndarray, jnp.ndarray]:
    """A Box's `(low, high)` as float32 arrays of its shape."""
    return (jnp.asarray(np.asarray(spec.low, np.float32).reshape(spec.shape)),
            jnp.asarray(np.asarray(spec.high, np.float32).reshape(spec.shape)))


def clip_actions(clip: bool = True, unsquash: bool = False) -> Connector:
    """`actions_for_env`: Box actions clipped to the bounds, or (unsquash) mapped from [-1, 1]
    onto them; other spaces pass through.

    Args:
      clip: clip Box actions to the bounds.
      unsquash: map actions from [-1, 1] onto the bounds instead of clipping.

    Returns:
      The stateless piece.
    """

    def apply(episodes, batch, ctx):
        spec = episodes.action_space_spec
        a = batch["actions"]
        if isinstance(spec, sp.BoxSpec):
            low, high = _box_bounds(spec)
            a = a.reshape(a.shape[0], *spec.shape)
            if unsquash:
                a = low + (jnp.clip(a, -1, 1) + 1.0) * 0.5 * (high - low)
            elif clip:
                a = jnp.clip(a, low, high)
        return episodes, {**batch, "actions_for_env": a}

    return stateless(apply)


def module_outputs(policy) -> Connector:
    """Runs the policy on `obs` with `ctx.params`: `action_dist_inputs` (handy when a whole
    env-to-module -> module -> module-to-env chain is jitted as one function).

    Args:
      policy: the policy `Module`.

    Returns:
      The stateless piece.
    """

    def apply(episodes, batch, ctx):
        return episodes, {**batch, "action_dist_inputs": policy.apply(ctx.params, batch["obs"])}

    return stateless(apply)


def default_module_to_env(spaces: Spaces, *custom: Connector,
                          add_default_connectors: bool = True, distribution=None) -> Connector:
    """custom pieces -> sample/argmax `actions` (+ `action_logp`) -> `actions_for_env`.
    `add_default_connectors=False` keeps only the custom pieces; `distribution` is the
    module's action distribution when it is not the space's default.

    Args:
      spaces: the env's observation and action spaces.
      *custom: the user's pieces, run first.
      add_default_connectors: append the default pieces after the custom ones.
      distribution: the module's action distribution (default: the space's).

    Returns:
      The pipeline.
    """
    if not add_default_connectors:
        return pipeline(*custom)
    return pipeline(*custom, get_actions(distribution), clip_actions())
