"""Pieces for stateful (recurrent) modules and reward shaping that needs whole episodes:
time dimension with zero padding to `max_seq_len`, `state_in` from the episodes, and the
count-based intrinsic reward of RLlib's learner-connector guide."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rljax_offline.connectors.core import Connector, stateless


def _num_seqs(T: int, S: int) -> int:
    return max(1, -(-T // S))


def add_time_dim(max_seq_len: int, as_learner_connector: bool = True) -> Connector:
    """RLlib's `AddTimeDimToBatchAndZeroPad`.

    Learner: every flat `[B * T, ...]` column becomes `[B * K, max_seq_len, ...]`, each
    episode split into `K = ceil(T / max_seq_len)` sequences and right zero-padded, with
    `seq_lens` `[B * K]` (0 for all-padding sequences, whose `loss_mask` is all False).
    Env-to-module: every `[B, ...]` column gets a time axis of 1 and `seq_lens` is all ones.
    """
    if max_seq_len < 1:
        raise ValueError(f"max_seq_len must be >= 1, got {max_seq_len}")
    S = int(max_seq_len)

    def apply(episodes, batch, ctx):
        B, T = episodes.batch_size, episodes.max_len
        if not as_learner_connector:
            out = {k: jax.tree_util.tree_map(lambda x: x[:, None], v) for k, v in batch.items()}
            return episodes, {**out, "seq_lens": jnp.ones(B, jnp.int32)}
        K = _num_seqs(T, S)

        def split(x):
            if x.shape[0] != B * T:
                return x
            x = x.reshape(B, T, *x.shape[1:])
            x = jnp.pad(x, [(0, 0), (0, K * S - T)] + [(0, 0)] * (x.ndim - 2))
            return x.reshape(B * K, S, *x.shape[2:])

        out = {k: jax.tree_util.tree_map(split, v) for k, v in batch.items()}
        starts = jnp.arange(K)[None, :] * S
        seq_lens = jnp.clip(episodes.lengths[:, None] - starts, 0, S).reshape(B * K)
        return episodes, {**out, "seq_lens": seq_lens.astype(jnp.int32)}

    return stateless(apply)


def add_states(max_seq_len: int | None = None, as_learner_connector: bool = True,
               key: str = "state_out", initial_state=None) -> Connector:
    """RLlib's `AddStatesFromEpisodesToBatch`: `state_in` from the module's previous
    `state_out` (an extra model output), or `initial_state` (zeros by default) where no earlier
    step exists. Learner: one `state_in` per sequence of `max_seq_len` (no time axis), the state
    before the sequence's first step. Env-to-module: the latest `state_out` of each episode."""

    def apply(episodes, batch, ctx):
        if key not in episodes.extra_model_outputs:
            raise KeyError(f"add_states needs the module's {key!r} in extra_model_outputs")
        states = episodes.extra_model_outputs[key]  # [B, L + T, ...]
        L, T, B = episodes.len_lookback_buffer, episodes.max_len, episodes.batch_size
        if as_learner_connector:
            if max_seq_len is None:
                raise ValueError("add_states as a learner connector needs max_seq_len")
            K = _num_seqs(T, max_seq_len)
            prev = jnp.arange(K)[None, :] * max_seq_len - 1  # step before each sequence
            prev = jnp.broadcast_to(prev, (B, K))
        else:
            prev = (episodes.lengths - 1)[:, None]
        valid = prev >= -episodes.lookback_lengths[:, None]
        cols = jnp.clip(L + prev, 0, max(L + T - 1, 0))

        def gather(x):
            picked = jnp.take_along_axis(x, cols.reshape(*cols.shape, *([1] * (x.ndim - 2))),
                                         axis=1)
            init = jnp.zeros_like(picked) if initial_state is None else jnp.broadcast_to(
                jnp.asarray(initial_state, x.dtype), picked.shape)
            mask = valid.reshape(*valid.shape, *([1] * (x.ndim - 2)))
            out = jnp.where(mask, picked, init)
            return out.reshape(-1, *out.shape[2:])

        return episodes, {**batch, "state_in": jax.tree_util.tree_map(gather, states)}

    return stateless(apply)


def count_based_intrinsic_reward(table_size: int = 1 << 16, coeff: float = 1.0) -> Connector:
    """r(t) += coeff / N(o_t), N counting how often observation o_t was seen so far, in
    episode then time order (the count-based curiosity of RLlib's learner-connector guide).

    The counts live in the state as a table of `table_size` hash buckets of the observation's
    bytes, so the piece is jit-compatible; distinct observations that share a bucket share a
    count (rare below ~sqrt(table_size) distinct observations). The new rewards are written
    back into the episodes, so `add_columns` puts them into the batch, as in RLlib.
    """

    def init(spaces):
        return jnp.zeros(table_size, jnp.int32)

    def mix(h):  # murmur3's finalizer: every input bit reaches the low bits
        h = (h ^ (h >> 16)) * jnp.uint32(0x85EBCA6B)
        h = (h ^ (h >> 13)) * jnp.uint32(0xC2B2AE35)
        return h ^ (h >> 16)

    def bucket(obs):
        words = jax.lax.bitcast_convert_type(obs.astype(jnp.float32), jnp.uint32)
        words = words.reshape(*obs.shape[:2], -1)
        h = jnp.full(words.shape[:2], 2166136261, jnp.uint32)
        for i in range(words.shape[-1]):
            h = mix(h ^ mix(words[..., i]) + jnp.uint32(i))
        return (h % jnp.uint32(table_size)).astype(jnp.int32)

    def apply(counts, episodes, batch, ctx):
        L, T = episodes.len_lookback_buffer, episodes.max_len
        obs = episodes.observations[:, L:L + T]
        mask = episodes.mask
        h = jnp.where(mask, bucket(obs), table_size).reshape(-1)  # padding: its own bucket
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
