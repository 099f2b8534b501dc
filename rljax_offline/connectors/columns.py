"""Pieces that move episode data into the batch, in either pipeline.

Env-to-module (`as_learner_connector=False`): one row per episode, the data of its latest step
(the observation at column `L + length`). Learner (`as_learner_connector=True`): one row per
timestep, FLAT `[B * T, ...]` in episode-major order, with `loss_mask` False on padding rows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rljax_offline.connectors.core import Connector, stateless


def _flat(x):
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def _latest(tree, episodes, offset: int = 0):
    """Per episode, the item at column `L + length + offset`."""
    idx = episodes.len_lookback_buffer + episodes.lengths + offset
    return jax.tree_util.tree_map(
        lambda x: jnp.take_along_axis(x, idx.reshape(-1, *([1] * (x.ndim - 1))), axis=1)[:, 0],
        tree)


def add_observations(as_learner_connector: bool = False) -> Connector:
    """`obs`: the latest observation of each episode, or (learner) every step's observation."""

    def apply(episodes, batch, ctx):
        if as_learner_connector:
            mask = episodes.mask

            def steps_only(x):  # the final observation has no step: zero it like padding
                m = mask.reshape(*mask.shape, *([1] * (x.ndim - 2)))
                return _flat(jnp.where(m, x, jnp.zeros((), x.dtype)))

            obs = jax.tree_util.tree_map(steps_only, episodes.steps(episodes.observations))
        else:
            obs = _latest(episodes.observations, episodes)
        return episodes, {**batch, "obs": obs}

    return stateless(apply)


def add_next_observations() -> Connector:
    """`new_obs`: the observation after each step (learner)."""

    def apply(episodes, batch, ctx):
        L, T = episodes.len_lookback_buffer, episodes.max_len
        new = jax.tree_util.tree_map(lambda x: _flat(x[:, L + 1:L + T + 1]),
                                     episodes.observations)
        return episodes, {**batch, "new_obs": new}

    return stateless(apply)


def add_columns(extra_model_outputs: bool = True) -> Connector:
    """Learner columns: `actions`, `rewards`, `terminateds`, `truncateds` (True only on an
    episode's last real step, with its flag), extra model outputs and `loss_mask`."""

    def apply(episodes, batch, ctx):
        mask = episodes.mask  # [B, T]
        T = episodes.max_len
        last = jnp.arange(T)[None, :] == (episodes.lengths[:, None] - 1)
        out = {
            "actions": jax.tree_util.tree_map(_flat, episodes.steps(episodes.actions)),
            "rewards": _flat(jnp.where(mask, episodes.steps(episodes.rewards), 0)),
            "terminateds": _flat(last & episodes.terminated[:, None]),
            "truncateds": _flat(last & episodes.truncated[:, None]),
            "loss_mask": _flat(mask),
        }
        if extra_model_outputs:
            for k, v in episodes.extra_model_outputs.items():
                out[k] = jax.tree_util.tree_map(_flat, episodes.steps(v))
        return episodes, {**batch, **out}

    return stateless(apply)


def clip_rewards(limit: float | None = 1.0, sign: bool = False) -> Connector:
    """Clips `rewards` in the batch to [-limit, limit], or to their sign (Atari style)."""

    def apply(episodes, batch, ctx):
        if "rewards" not in batch:
            raise KeyError("clip_rewards needs a 'rewards' column: put it after add_columns")
        r = batch["rewards"]
        r = jnp.sign(r) if sign else jnp.clip(r, -limit, limit)
        return episodes, {**batch, "rewards": r}

    return stateless(apply)


def prev_actions_rewards(n_prev_actions: int = 1, n_prev_rewards: int = 1,
                         as_learner_connector: bool = False) -> Connector:
    """`prev_n_actions` `[.., n, *act]` and `prev_n_rewards` `[.., n]`: the actions/rewards
    before each step, zeros before the episode's first available step (RLlib's
    `PrevActionsPrevRewards`)."""

    def window(x, valid, n):
        # x: [B, C, ...] -> [B, C + 1, n, ...]: for every column c (one past the end too, the
        # latest step of a full episode), the items c-n .. c-1; invalid items are zero.
        x = jnp.where(valid.reshape(*valid.shape, *([1] * (x.ndim - 2))), x, 0)
        x = jnp.pad(x, [(0, 0), (0, 1)] + [(0, 0)] * (x.ndim - 2))
        cols = [jnp.pad(x, [(0, 0), (k, 0)] + [(0, 0)] * (x.ndim - 2))[:, :x.shape[1]]
                for k in range(n, 0, -1)]
        return jnp.stack(cols, axis=2)

    def apply(episodes, batch, ctx):
        valid = episodes.lookback_mask
        L, T = episodes.len_lookback_buffer, episodes.max_len
        acts = window(episodes.actions, valid, n_prev_actions)
        rews = window(episodes.rewards, valid, n_prev_rewards)
        if as_learner_connector:
            a, r = _flat(acts[:, L:L + T]), _flat(rews[:, L:L + T])
        else:
            a, r = _latest(acts, episodes), _latest(rews, episodes)
        return episodes, {**batch, "prev_n_actions": a, "prev_n_rewards": r}

    return stateless(apply)
