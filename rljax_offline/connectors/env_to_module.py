"""Observation pieces RLlib puts in env-to-module pipelines: flatten / one-hot and previous
actions and rewards, plus the default env-to-module pipeline (the mean-std filter is in
`connectors.mean_std`). They rewrite the episodes' observations (every
column, lookback included) as RLlib rewrites its episodes, so the same piece also serves a
learner pipeline.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.connectors.common import (
    add_observations,
    add_states,
    add_time_dim,
    expand,
    from_spec_tree,
    map_leaves,
    zero_of,
)
from rljax_offline.connectors.core import PREV_ACTIONS_REWARDS, Connector, Spaces, pipeline

# ------------------------------------------------------------------------------ flatten, one-hot


def _flatten_leaf(x, spec):
    """`[..., *shape]` data of a leaf space -> `[..., flat_dim]` float32 (Discrete one-hot)."""
    lead = x.shape[:x.ndim - len(spec.shape)]
    if isinstance(spec, sp.DiscreteSpec):
        return jax.nn.one_hot(x - spec.start, spec.n, dtype=jnp.float32)
    if isinstance(spec, sp.MultiDiscreteSpec):
        flat = x.reshape(*lead, -1)
        starts = spec.start or (0,) * len(spec.nvec)
        return jnp.concatenate([jax.nn.one_hot(flat[..., i] - starts[i], n, dtype=jnp.float32)
                                for i, n in enumerate(spec.nvec)], axis=-1)
    return x.reshape(*lead, -1).astype(jnp.float32)


def _flatten(obs, spec):
    if isinstance(spec, sp.TupleSpec):
        return jnp.concatenate([_flatten(o, s) for o, s in zip(obs, spec.spaces)], axis=-1)
    if isinstance(spec, sp.DictSpec):
        return jnp.concatenate([_flatten(obs[k], s) for k, s in spec.items()], axis=-1)
    return _flatten_leaf(obs, spec)


def _flat_box(spec) -> sp.BoxSpec:
    d = sp.flat_dim(spec)
    if isinstance(spec, sp.BoxSpec):
        return sp.BoxSpec((d,), "float32", spec.low, spec.high)
    if isinstance(spec, (sp.DiscreteSpec, sp.MultiDiscreteSpec, sp.MultiBinarySpec)):
        return sp.BoxSpec((d,), "float32", (0.0,) * d, (1.0,) * d)
    lows, highs = [], []
    for s in spec.spaces:
        b = _flat_box(s)
        lows += list(b.low)
        highs += list(b.high)
    return sp.BoxSpec((d,), "float32", tuple(lows), tuple(highs))


def needs_flattening(spec) -> bool:
    """True unless the observations are flat Box vectors or images (rank-3 Box, which the
    model's CNN reads as they are, as RLlib's catalog picks a CNN for them).

    Args:
      spec: the observation space's spec.
    """
    return not (isinstance(spec, sp.BoxSpec) and len(spec.shape) in (1, 3))


def _require_spec(episodes, piece):
    if episodes.observation_space_spec is None:
        raise ValueError(f"{piece} needs the observation space on the episodes")
    return episodes.observation_space_spec


def flatten_observations() -> Connector:
    """RLlib's `FlattenObservations`: Dict/Tuple observations concatenated (Dict keys in the
    space's order), Discrete/MultiDiscrete one-hot, Box flattened: `Box(flat_dim,)` float32.

    Returns:
      The stateless piece.
    """

    def apply(state, episodes, batch, ctx):
        spec = _require_spec(episodes, "flatten_observations")
        obs = _flatten(episodes.observations, spec)
        return (episodes.replace(observations=obs, observation_space_spec=_flat_box(spec)),
                batch, state)

    return Connector(init=lambda spaces: (), apply=apply,
                     out_spaces=lambda s: s._replace(observation=_flat_box(s.observation)))


def _one_hot_spec(spec):
    return from_spec_tree(map_leaves(
        lambda s: _flat_box(s) if isinstance(s, sp.DiscreteSpec) else s, spec))


def one_hot_observations() -> Connector:
    """Discrete observations (leaves of a Dict/Tuple too) as one-hot float32 vectors:
    `Discrete(n)` -> `Box(n,)`; other leaves unchanged.

    Returns:
      The stateless piece.
    """

    def apply(state, episodes, batch, ctx):
        spec = _require_spec(episodes, "one_hot_observations")
        obs = map_leaves(lambda s, x: _flatten_leaf(x, s) if isinstance(s, sp.DiscreteSpec)
                          else x, spec, episodes.observations)
        return (episodes.replace(observations=obs, observation_space_spec=_one_hot_spec(spec)),
                batch, state)

    return Connector(init=lambda spaces: (), apply=apply,
                     out_spaces=lambda s: s._replace(observation=_one_hot_spec(s.observation)))


# ------------------------------------------------------------------------- prev actions, rewards

ORIG_OBS_KEY, PREV_ACTIONS_KEY, PREV_REWARDS_KEY = "_orig_obs", "prev_n_actions", "prev_n_rewards"


def _window(x, valid, n):
    """`x` `[B, C, ...]` (actions/rewards columns) -> `[B, C + 1, n, ...]`: for every
    observation column c, the items c-n .. c-1 (oldest first); invalid items are zero."""
    x = jnp.where(expand(valid, x), x, zero_of(x))
    x = jnp.pad(x, [(0, 0), (0, 1)] + [(0, 0)] * (x.ndim - 2))
    cols = [jnp.pad(x, [(0, 0), (k, 0)] + [(0, 0)] * (x.ndim - 2))[:, :x.shape[1]]
            for k in range(n, 0, -1)]
    return jnp.stack(cols, axis=2)


def _prev_spec(obs_spec, act_spec, n_prev_actions: int, n_prev_rewards: int):
    """RLlib's `Dict(_orig_obs, prev_n_actions, prev_n_rewards)` observation space."""
    if obs_spec is None or act_spec is None:
        return None
    keys, spaces = [ORIG_OBS_KEY], [obs_spec]
    if n_prev_actions:
        act = _flat_box(act_spec)
        keys.append(PREV_ACTIONS_KEY)
        spaces.append(sp.BoxSpec((n_prev_actions * act.shape[0],), "float32",
                                 act.low * n_prev_actions, act.high * n_prev_actions))
    if n_prev_rewards:
        keys.append(PREV_REWARDS_KEY)
        spaces.append(sp.BoxSpec((n_prev_rewards,), "float32", (-np.inf,) * n_prev_rewards,
                                 (np.inf,) * n_prev_rewards))
    return sp.DictSpec(tuple(keys), tuple(spaces))


def prev_actions_rewards(n_prev_actions: int = 1, n_prev_rewards: int = 1,
                         as_learner_connector: bool = False) -> Connector:
    """RLlib's `PrevActionsPrevRewards`: each observation becomes
    `{"_orig_obs": obs, "prev_n_actions": [n * A], "prev_n_rewards": [n]}`, the `n` actions
    (Discrete one-hot, Box flattened; RLlib's `one_hot_discrete=True`) and rewards before it,
    oldest first, zeros before the episode's first available step (an all-zero one-hot for
    Discrete, as RLlib's `fill=0.0`). The default pipelines then flatten it, so the module's
    input grows by `n * A + n` dimensions (`out_spaces` says so).

    Every observation column is rewritten (RLlib writes the latest one back into the episode
    at each step), so the piece serves both pipelines alike; `as_learner_connector` is
    accepted for RLlib's signature. A key is left out when its `n` is 0.

    Args:
      n_prev_actions: previous actions added to each observation (0: none).
      n_prev_rewards: previous rewards added to each observation (0: none).
      as_learner_connector: accepted for RLlib's signature; the piece is the same.

    Returns:
      The stateless piece; its `lookback` is the larger `n`.
    """
    if n_prev_actions < 0 or n_prev_rewards < 0 or not (n_prev_actions or n_prev_rewards):
        raise ValueError(f"need n_prev_actions or n_prev_rewards >= 1, got {n_prev_actions}, "
                         f"{n_prev_rewards}")

    def apply(state, episodes, batch, ctx):
        act_spec = episodes.action_space_spec
        if act_spec is None:
            raise ValueError("prev_actions_rewards needs the action space on the episodes")
        valid = episodes.lookback_mask
        obs = {ORIG_OBS_KEY: episodes.observations}
        if n_prev_actions:
            enc = _flatten(episodes.actions, act_spec)  # [B, C, A] float32
            w = _window(enc, valid, n_prev_actions)
            obs[PREV_ACTIONS_KEY] = w.reshape(*w.shape[:2], -1)
        if n_prev_rewards:
            obs[PREV_REWARDS_KEY] = _window(episodes.rewards.astype(jnp.float32), valid,
                                            n_prev_rewards)
        spec = _prev_spec(episodes.observation_space_spec, act_spec, n_prev_actions,
                          n_prev_rewards)
        return episodes.replace(observations=obs, observation_space_spec=spec), batch, state

    return Connector(init=lambda spaces: (), apply=apply,
                     out_spaces=lambda s: s._replace(observation=_prev_spec(
                         s.observation, s.action, n_prev_actions, n_prev_rewards)),
                     lookback=max(n_prev_actions, n_prev_rewards),
                     name="prev_actions_rewards", role=PREV_ACTIONS_REWARDS)


def model_connectors(model_config: dict) -> list[Connector]:
    """The pieces a model config asks of both pipelines (RLlib's `lstm_use_prev_action` /
    `lstm_use_prev_reward`: the previous action / reward as part of the observation); put them
    in front of the defaults and build the policy from the pipeline's `out_spaces`.

    Args:
      model_config: RLlib's model config dict.

    Returns:
      The pieces (empty when the config asks for none).
    """
    n_act = int(bool(model_config.get("lstm_use_prev_action", False)))
    n_rew = int(bool(model_config.get("lstm_use_prev_reward", False)))
    return [prev_actions_rewards(n_act, n_rew)] if n_act or n_rew else []


# ------------------------------------------------------------------------------ default pipeline


def default_env_to_module(spaces: Spaces, *custom: Connector,
                          add_default_connectors: bool = True,
                          max_seq_len: int | None = None, initial_state=None) -> Connector:
    """custom pieces -> flatten (if the observations are not flat Box vectors after them) ->
    `obs` of each episode's latest step; for a stateful module (`max_seq_len` set) also
    `state_in` (`initial_state`, e.g. `policy.initial_state()`, for episodes that just
    started) and a time axis of 1. `add_default_connectors=False` keeps only the custom
    pieces (RLlib's `add_default_connectors_to_env_to_module_pipeline=False`).

    Args:
      spaces: the env's observation and action spaces.
      *custom: the user's pieces, run first.
      add_default_connectors: append the default pieces after the custom ones.
      max_seq_len: steps per sequence of a stateful module (None: stateless).
      initial_state: a stateful module's initial state.

    Returns:
      The pipeline.
    """
    if not add_default_connectors:
        return pipeline(*custom)
    stateful = [] if max_seq_len is None else [
        add_states(as_learner_connector=False, initial_state=initial_state),
        add_time_dim(max_seq_len, as_learner_connector=False)]
    return pipeline(*custom, *obs_defaults(spaces, custom), add_observations(), *stateful)


def obs_defaults(spaces: Spaces, custom) -> list[Connector]:
    """`[flatten_observations()]` when the observations after `custom` are not flat vectors.

    Args:
      spaces: the env's spaces.
      custom: the user's pieces (their `out_spaces` apply first).
    """
    obs = pipeline(*custom).out_spaces(spaces).observation
    return [flatten_observations()] if obs is not None and needs_flattening(obs) else []
