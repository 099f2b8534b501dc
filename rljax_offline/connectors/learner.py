"""Learner pieces (RLlib's `connectors/learner`): the train-batch columns from the episodes,
reward shaping, and the default learner pipeline. Output rows are FLAT timesteps `[B * T, ...]`
in episode-major order; `loss_mask` is False on padding rows and every column is zero there.
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
    flat,
    zero_of,
)
from rljax_offline.connectors.core import Connector, Spaces, pipeline, stateless
from rljax_offline.connectors.env_to_module import obs_defaults


def _zero_padding(x, mask):
    return jnp.where(expand(mask, x), x, zero_of(x))


def add_columns(extra_model_outputs: bool = True) -> Connector:
    """RLlib's `AddColumnsFromEpisodesToTrainBatch`: `actions`, `rewards`, `terminateds`,
    `truncateds` (True only on an episode's last real step, with its flag), the extra model
    outputs by key and `loss_mask`.

    Args:
      extra_model_outputs: also add the episodes' extra model outputs (`action_logp`, ...).

    Returns:
      The stateless piece.
    """

    def apply(episodes, batch, ctx):
        mask = episodes.mask  # [B, T]
        last = jnp.arange(episodes.max_len)[None, :] == (episodes.lengths[:, None] - 1)
        out = {
            "actions": jax.tree_util.tree_map(lambda x: flat(_zero_padding(x, mask)),
                                              episodes.steps(episodes.actions)),
            "rewards": flat(_zero_padding(episodes.steps(episodes.rewards), mask)),
            "terminateds": flat(last & episodes.terminated[:, None]),
            "truncateds": flat(last & episodes.truncated[:, None]),
            "loss_mask": flat(mask),
        }
        if extra_model_outputs:
            for k, v in episodes.extra_model_outputs.items():
                out[k] = jax.tree_util.tree_map(lambda x: flat(_zero_padding(x, mask)),
                                                episodes.steps(v))
        return episodes, {**batch, **out}

    return stateless(apply)


def add_next_observations() -> Connector:
    """RLlib's `AddNextObservationsFromEpisodesToTrainBatch`: `new_obs`, the observation after
    each step (zero on padding rows).

    Returns:
      The stateless piece.
    """

    def apply(episodes, batch, ctx):
        L, T = episodes.len_lookback_buffer, episodes.max_len
        mask = episodes.mask
        new = jax.tree_util.tree_map(lambda x: flat(_zero_padding(x[:, L + 1:L + T + 1], mask)),
                                     episodes.observations)
        return episodes, {**batch, "new_obs": new}

    return stateless(apply)


def add_next_actions() -> Connector:
    """`next_actions`, the data's action at the step after each step of the same episode, and
    `next_actions_valid`, 1.0 where there is one (0.0 on an episode's last step, where the
    column holds zeros, and on padding). For losses that compare a policy's action at `s'`
    with the data's (ReBRAC's critic penalty). Put it after any piece that changes `actions`
    (it reads the batch's `actions` column, so clipped actions stay clipped).

    Returns:
      The stateless piece.
    """

    def apply(episodes, batch, ctx):
        B, T = episodes.batch_size, episodes.max_len
        actions = batch["actions"]
        stepped = actions.reshape(B, T, *actions.shape[1:])
        nxt = jnp.concatenate([stepped[:, 1:], jnp.zeros_like(stepped[:, :1])], axis=1)
        valid = (jnp.arange(T)[None, :] + 1) < episodes.lengths[:, None]
        nxt = jnp.where(expand(valid, nxt), nxt, zero_of(nxt))
        return episodes, {**batch, "next_actions": flat(nxt),
                          "next_actions_valid": flat(valid).astype(jnp.float32)}

    return stateless(apply)


def clip_actions_inside_bounds(margin: float = 1e-6) -> Connector:
    """Box `actions` clipped just inside the action space's bounds: to
    `[low + margin * (high - low) / 2, high - margin * (high - low) / 2]`.

    For learners whose likelihood cannot represent actions outside the bounds (a tanh-squashed
    Gaussian's log-probability is -inf there, and at the bounds themselves): RLlib records the
    sampled, unclipped action of a Gaussian policy, so such data holds many. The env ran the
    clipped action, so the clipped one is also what the transition's reward and next
    observation belong to. Unbounded dimensions and other spaces pass through.

    Args:
      margin: how far inside the bounds, as a fraction of each half-width.

    Returns:
      The stateless piece.
    """

    def apply(episodes, batch, ctx):
        spec = episodes.action_space_spec
        if not isinstance(spec, sp.BoxSpec) or "actions" not in batch:
            return episodes, batch
        low = np.asarray(spec.low, np.float32).reshape(spec.shape)
        high = np.asarray(spec.high, np.float32).reshape(spec.shape)
        finite = np.isfinite(low) & np.isfinite(high)
        inset = np.where(finite, margin * (high - low) / 2, 0.0).astype(np.float32)
        a = batch["actions"]
        shaped = a.reshape(a.shape[0], *spec.shape)
        clipped = jnp.clip(shaped, jnp.asarray(low + inset), jnp.asarray(high - inset))
        return episodes, {**batch, "actions": clipped.reshape(a.shape).astype(a.dtype)}

    return stateless(apply)


def clip_rewards(limit: float | None = 1.0, sign: bool = False) -> Connector:
    """Clips `rewards` in the batch to `[-limit, limit]`, or to their sign (Atari style).

    Args:
      limit: the bound (None: no clipping by value).
      sign: replace each reward by its sign instead.

    Returns:
      The stateless piece.
    """
    if not sign and limit is None:
        raise ValueError("clip_rewards needs a limit or sign=True")

    def apply(episodes, batch, ctx):
        if "rewards" not in batch:
            raise KeyError("clip_rewards needs a 'rewards' column: put it after add_columns")
        r = batch["rewards"]
        r = jnp.sign(r) if sign else jnp.clip(r, -limit, limit)
        return episodes, {**batch, "rewards": r}

    return stateless(apply)


def _mix(h):
    """murmur3's 32-bit finalizer: every input bit reaches the low bits."""
    h = (h ^ (h >> 16)) * jnp.uint32(0x85EBCA6B)
    h = (h ^ (h >> 13)) * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def observation_buckets(obs, table_size: int):
    """`[B, T, ...]` observations -> `[B, T]` int32 hash buckets in `[0, table_size)` of their
    float32 bytes. Word i of an observation folds in as `h <- mix(h ^ (mix(w_i) + i))` from
    `h = 2166136261`; a `lax.scan` over the words keeps the compiled program the same size at 4
    dims and at 4096 (an unrolled Python loop's compile time grows with the width: see the
    benchmarks page's figures behind design choices).

    Args:
      obs: `[B, T, ...]` observations.
      table_size: the number of buckets.

    Returns:
      `[B, T]` int32 bucket indices.
    """
    words = jax.lax.bitcast_convert_type(obs.astype(jnp.float32), jnp.uint32)
    words = words.reshape(*obs.shape[:2], -1)
    salted = _mix(words) + jnp.arange(words.shape[-1], dtype=jnp.uint32)

    def fold(h, w):
        return _mix(h ^ w), None

    h0 = jnp.full(words.shape[:2], 2166136261, jnp.uint32)
    h, _ = jax.lax.scan(fold, h0, jnp.moveaxis(salted, -1, 0))
    return (h % jnp.uint32(table_size)).astype(jnp.int32)


def count_based_intrinsic_reward(table_size: int = 1 << 16, coeff: float = 1.0) -> Connector:
    """r(t) += coeff / N(o_t), N counting how often observation o_t was seen so far, in
    episode then time order (the count-based curiosity of RLlib's learner-connector guide).

    The counts live in the state as a table of `table_size` hash buckets of the observation's
    bytes, so the piece is jit-compatible; distinct observations that share a bucket share a
    count (rare below ~sqrt(table_size) distinct observations). The new rewards are written
    back into the episodes, so `add_columns` puts them into the batch, as in RLlib.

    Args:
      table_size: hash buckets of the count table.
      coeff: the intrinsic reward's scale.

    Returns:
      The piece; its state is the count table.
    """

    def init(spaces):
        return jnp.zeros(table_size, jnp.int32)

    def apply(counts, episodes, batch, ctx):
        L, T = episodes.len_lookback_buffer, episodes.max_len
        obs = episodes.observations[:, L:L + T]
        mask = episodes.mask
        h = observation_buckets(obs, table_size)
        h = jnp.where(mask, h, table_size).reshape(-1)  # padding: a bucket of its own
        order = jnp.argsort(h, stable=True)
        hs = h[order]
        idx = jnp.arange(hs.shape[0])
        first = jnp.concatenate([jnp.ones(1, bool), hs[1:] != hs[:-1]])
        rank_sorted = idx - jax.lax.cummax(jnp.where(first, idx, 0))
        rank = jnp.zeros_like(rank_sorted).at[order].set(rank_sorted)
        n = counts.at[jnp.minimum(h, table_size - 1)].get() + rank + 1
        bonus = jnp.where(mask.reshape(-1), coeff / n, 0.0).reshape(mask.shape)
        rewards = jnp.asarray(episodes.rewards)
        rewards = rewards.at[:, L:L + T].add(bonus.astype(rewards.dtype))
        counts = counts.at[h].add(1, mode="drop")
        return episodes.replace(rewards=rewards), batch, counts

    return Connector(init=init, apply=apply, out_spaces=lambda s: s)


def compact_rows(batch: dict, size: int | None = None, action_space=None) -> dict:
    """A flat learner batch (`[B * T, ...]` rows with `loss_mask`) as RLlib lays it out for
    non-recurrent modules: the valid timesteps only, in episode then time order.

    `size=None` (on the host): exactly the valid rows, as numpy, with RLlib's dtypes (see
    `rllib_dtypes`). `size=n` (inside `jit`, where shapes are static): the first `n` valid rows,
    then zero rows with `loss_mask` False if fewer are valid (rows beyond `n` are dropped: size
    it from the data's step count). A recurrent batch (with `seq_lens`) keeps its
    `[num_seqs, max_seq_len]` sequences, as RLlib does, and loses only the all-padding
    sequences (`seq_lens == 0`) that static shapes add: then each episode has exactly
    `ceil(length / max_seq_len)` sequences, RLlib's count.

    Args:
      batch: the flat learner batch, with `loss_mask`.
      size: rows to keep (static, inside `jit`); None keeps exactly the valid rows (host).
      action_space: the action space, for `rllib_dtypes` (host only).

    Returns:
      The compacted batch.
    """
    if "loss_mask" not in batch:
        raise KeyError("compact_rows needs the 'loss_mask' column (from add_columns)")
    if "seq_lens" in batch:
        keep_seq = np.asarray(batch["seq_lens"]) > 0
        if size is not None:
            raise ValueError("compact_rows(size=...) is for flat [B * T] batches; compact a "
                             "recurrent batch on the host (size=None)")
        rows = jax.tree_util.tree_map(lambda x: np.asarray(x)[keep_seq], batch)
        return rllib_dtypes(rows, action_space)
    if size is None:
        keep = np.asarray(batch["loss_mask"], bool)
        rows = jax.tree_util.tree_map(lambda x: np.asarray(x)[keep], batch)
        return rllib_dtypes(rows, action_space)
    mask = batch["loss_mask"]
    idx = jnp.nonzero(mask, size=size, fill_value=0)[0]
    valid = jnp.arange(size) < jnp.sum(mask)
    out = jax.tree_util.tree_map(lambda x: _zero_padding(x[idx], valid), batch)
    return {**out, "loss_mask": valid}


def rllib_dtypes(batch: dict, action_space=None) -> dict:
    """Host columns with the dtypes of RLlib's train batches: `actions` of the action space's
    dtype (int64 for Discrete; inside `jit` without `jax_enable_x64` they are int32),
    `terminateds` / `truncateds` / `loss_mask` bool, `rewards` float32, `seq_lens` int32.

    Args:
      batch: the host columns.
      action_space: the action space whose dtype `actions` get (default: unchanged).

    Returns:
      The columns with RLlib's dtypes.
    """
    out = dict(batch)
    spec = sp.to_spec(action_space) if action_space is not None else None
    if "actions" in out and spec is not None and not isinstance(spec, (sp.DictSpec,
                                                                       sp.TupleSpec)):
        dtype = np.int64 if isinstance(spec, sp.DiscreteSpec) else np.dtype(spec.dtype)
        out["actions"] = np.asarray(out["actions"]).astype(dtype)
    for k, dtype in (("terminateds", bool), ("truncateds", bool), ("loss_mask", bool),
                     ("rewards", np.float32), ("seq_lens", np.int32)):
        if k in out:
            out[k] = np.asarray(out[k]).astype(dtype)
    return out


def default_learner(spaces: Spaces, *custom: Connector, add_default_connectors: bool = True,
                    max_seq_len: int | None = None, initial_state=None) -> Connector:
    """custom pieces -> flatten (if needed) -> `obs`, `actions`, `rewards`, flags, extra model
    outputs, `loss_mask`, `new_obs`, flat `[B * T, ...]`; for a stateful module (`max_seq_len`
    set) then `state_in` per sequence (from `initial_state`, e.g. `policy.initial_state()`,
    where no recorded `state_out` precedes it) and the time axis, `[B * K, max_seq_len, ...]`.
    `add_default_connectors=False` keeps only the custom pieces (RLlib's
    `add_default_connectors_to_learner_pipeline=False`).

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
        add_states(max_seq_len, initial_state=initial_state), add_time_dim(max_seq_len)]
    return pipeline(*custom, *obs_defaults(spaces, custom),
                    add_observations(as_learner_connector=True), add_columns(),
                    add_next_observations(), *stateful)
