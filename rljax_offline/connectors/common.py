"""Pieces that serve both the env-to-module and the learner pipeline (RLlib's
`connectors/common`): observations, states, time dim, frame stacking, previous actions/rewards.

The mode is the piece's `as_learner_connector` argument, as in RLlib:

* env-to-module (`False`): one row per episode, `[B, ...]`, the data of its latest step (the
  observation at column `L + lengths[b]`).
* learner (`True`): one row per timestep, FLAT `[B * T, ...]` in episode-major order; rows past an
  episode's length are padding (`loss_mask` False there, see `learner.add_columns`).

Pieces that rewrite the episodes' observations (`frame_stack`, the filters) act on every
observation column, lookback included, so either pipeline reads the result.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.connectors.core import OBSERVATIONS, STATES, Connector, stateless


def zero_of(x):
    """A zero scalar of `x`'s dtype as JAX holds it (int64 host data is int32 on the device
    without `jax_enable_x64`; asking for int64 would warn on every eager call).

    Args:
      x: the array.
    """
    return jnp.zeros((), jax.dtypes.canonicalize_dtype(x.dtype))


def flat(x):
    """`[B, T, ...]` -> `[B * T, ...]`.

    Args:
      x: the array.
    """
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def expand(mask, x):
    """`mask` `[B, C]` broadcastable against `x` `[B, C, ...]`.

    Args:
      mask: the `[B, C]` mask.
      x: the `[B, C, ...]` array.
    """
    return mask.reshape(*mask.shape, *([1] * (x.ndim - mask.ndim)))


def latest(tree, episodes, offset: int = 0):
    """Per episode, the item at column `L + length + offset` of each `[B, C, ...]` leaf.

    Args:
      tree: `[B, C, ...]` arrays.
      episodes: the `EpisodeBatch` (its `L` and `lengths`).
      offset: the column relative to each episode's latest observation.
    """
    idx = episodes.len_lookback_buffer + episodes.lengths + offset
    return jax.tree_util.tree_map(
        lambda x: jnp.take_along_axis(x, idx.reshape(-1, *([1] * (x.ndim - 1))), axis=1)[:, 0],
        tree)


def add_observations(as_learner_connector: bool = False) -> Connector:
    """`obs` (RLlib's `AddObservationsFromEpisodesToBatch`): the latest observation of each
    episode, or (learner) every observation that has an action, zero on padding rows.

    Args:
      as_learner_connector: every observation that has an action (learner pipeline, flat
        `[B * T, ...]` rows) instead of each episode's latest one (env-to-module).

    Returns:
      The stateless piece.
    """

    def apply(episodes, batch, ctx):
        if as_learner_connector:
            mask = episodes.mask
            obs = jax.tree_util.tree_map(
                lambda x: flat(jnp.where(expand(mask, x), x, zero_of(x))),
                episodes.steps(episodes.observations))
        else:
            obs = latest(episodes.observations, episodes)
        return episodes, {**batch, "obs": obs}

    return stateless(apply, role=OBSERVATIONS)


def num_sequences(T: int, S: int) -> int:
    """Sequences of `S` steps per episode row of a `T`-step batch (RLlib's count, >= 1).

    Args:
      T: the batch's padded steps.
      S: steps per sequence (`max_seq_len`).
    """
    return max(1, -(-T // S))


def add_time_dim(max_seq_len: int, as_learner_connector: bool = True) -> Connector:
    """RLlib's `AddTimeDimToBatchAndZeroPad`.

    Learner: every flat `[B * T, ...]` column becomes `[B * K, max_seq_len, ...]`, each
    episode split into `K = ceil(T / max_seq_len)` sequences and right zero-padded, with
    `seq_lens` `[B * K]` (0 for all-padding sequences, whose `loss_mask` is all False).
    Env-to-module: every `[B, ...]` column but `state_in` (one state per sequence, as in
    RLlib) gets a time axis of 1 and `seq_lens` is all ones.

    Args:
      max_seq_len: steps per sequence (RLlib's `max_seq_len`).
      as_learner_connector: split episodes into sequences (learner) rather than add a time
        axis of 1 (env-to-module).

    Returns:
      The stateless piece.
    """
    if max_seq_len < 1:
        raise ValueError(f"max_seq_len must be >= 1, got {max_seq_len}")
    S = int(max_seq_len)

    def apply(episodes, batch, ctx):
        B, T = episodes.batch_size, episodes.max_len
        if not as_learner_connector:
            out = {k: v if k in ("state_in", "next_state_in")
                   else jax.tree_util.tree_map(lambda x: x[:, None], v)
                   for k, v in batch.items()}
            return episodes, {**out, "seq_lens": jnp.ones(B, jnp.int32)}
        K = num_sequences(T, S)

        def split(x):
            if x.shape[0] != B * T:  # not a timestep column: leave it
                return x
            x = x.reshape(B, T, *x.shape[1:])
            x = jnp.pad(x, [(0, 0), (0, K * S - T)] + [(0, 0)] * (x.ndim - 2))
            return x.reshape(B * K, S, *x.shape[2:])

        # `state_in` is one per sequence by name: its row count can equal B * T (sequences
        # of one step, or episodes of one), so its shape cannot tell.
        out = {k: v if k in ("state_in", "next_state_in") else jax.tree_util.tree_map(split, v)
               for k, v in batch.items()}
        starts = jnp.arange(K)[None, :] * S
        seq_lens = jnp.clip(episodes.lengths[:, None] - starts, 0, S).reshape(B * K)
        return episodes, {**out, "seq_lens": seq_lens.astype(jnp.int32)}

    return stateless(apply)


def add_states(max_seq_len: int | None = None, as_learner_connector: bool = True,
               key: str = "state_out", initial_state=None) -> Connector:
    """RLlib's `AddStatesFromEpisodesToBatch`: `state_in` from the module's recorded
    `state_out` (an extra model output, a pytree such as `{"h": .., "c": ..}`), or the module's
    `initial_state` (a pytree of per-episode arrays, e.g. `policy.initial_state()`).

    Env-to-module: an episode that just started (`t_started == 0` and no step yet) gets the
    initial state, an ongoing one its latest `state_out`. Learner: one `state_in` per sequence
    of `max_seq_len` steps (no time axis), the `state_out` of the step before the sequence;
    for the first sequence of an episode that starts at its reset (`t_started == 0`) the
    initial state, for a continuation chunk the `state_out` of the last lookback step.
    Learner, when `new_obs` is in the batch (put this piece after `add_next_observations`):
    also `next_state_in`, one per sequence, the `state_out` at the sequence's first step (the
    state to unroll the sequence's `new_obs` from), as RLlib's `NEXT_STATE_IN`; the initial
    state where the episode carries no `state_out` (zeros for the default initial state) and
    for all-padding sequences.

    Beyond RLlib: where no earlier `state_out` exists (episodes recorded by a module without
    state, e.g. an expert's, or a chunk without lookback) the initial state is used, so
    recurrent modules learn from any offline data, each sequence starting from the initial
    state (R2D2's "zero state"). With no `initial_state` given, the initial state is zeros
    shaped like the recorded `state_out`.

    Args:
      max_seq_len: steps per sequence (learner; each sequence gets one `state_in`).
      as_learner_connector: one state per sequence (learner) instead of one per episode
        (env-to-module).
      key: the extra model output that holds the recorded state.
      initial_state: the module's initial state, a pytree of per-episode arrays (default:
        zeros shaped like the recorded state).

    Returns:
      The stateless piece.
    """
    if as_learner_connector and max_seq_len is None:
        raise ValueError("add_states as a learner connector needs max_seq_len")
    init_tree = None if initial_state is None else jax.tree_util.tree_map(
        np.asarray, initial_state)

    def initial_for(template, rows: int):
        """The initial state repeated over `rows`, shaped as `template`'s items."""
        if init_tree is None:
            if template is None:
                raise ValueError(
                    f"add_states: the episodes have no {key!r} extra model output yet and no "
                    "initial_state was given: pass initial_state=policy.initial_state()")
            return jax.tree_util.tree_map(
                lambda x: jnp.zeros((rows, *x.shape[2:]), x.dtype), template)
        return jax.tree_util.tree_map(
            lambda x: jnp.broadcast_to(jnp.asarray(x), (rows, *x.shape)), init_tree)

    def apply(episodes, batch, ctx):
        L, T, B = episodes.len_lookback_buffer, episodes.max_len, episodes.batch_size
        if as_learner_connector:
            K = num_sequences(T, max_seq_len)
            prev = jnp.broadcast_to(jnp.arange(K)[None, :] * max_seq_len - 1, (B, K))
            fresh = (jnp.arange(K)[None, :] == 0) & (episodes.t_started[:, None] == 0)
        else:
            K = 1
            prev = (episodes.lengths - 1)[:, None]
            fresh = ((episodes.t_started == 0) & (episodes.lengths == 0))[:, None]
        states = episodes.extra_model_outputs.get(key)  # [B, L + T, ...] or absent
        init = initial_for(states, B * K)
        with_next = as_learner_connector and "new_obs" in batch
        if states is None:
            return episodes, {**batch, "state_in": init,
                              **({"next_state_in": init} if with_next else {})}
        if jax.tree_util.tree_structure(states) != jax.tree_util.tree_structure(init):
            raise ValueError(
                f"add_states: the recorded {key!r} has the structure "
                f"{jax.tree_util.tree_structure(states)}, the initial state "
                f"{jax.tree_util.tree_structure(init)}; they must match (e.g. "
                "{'h': .., 'c': ..} for an LSTM)")
        # Learner: only sequences that start inside the episode (prev + 1 < length) take a
        # recorded state; all-padding ones keep the initial state. Env-to-module: the state
        # after the latest step (prev = length - 1).
        last = episodes.lengths[:, None] - (1 if as_learner_connector else 0)
        recorded = (prev >= -episodes.lookback_lengths[:, None]) & (prev < last) & ~fresh
        cols = jnp.clip(L + prev, 0, max(L + T - 1, 0))

        def gather(x, first):
            picked = jnp.take_along_axis(x, expand(cols, x), axis=1)
            picked = picked.reshape(B * K, *picked.shape[2:])
            return jnp.where(expand(recorded.reshape(-1), picked), picked,
                             first.astype(picked.dtype))

        out = {**batch, "state_in": jax.tree_util.tree_map(gather, states, init)}
        if with_next:  # the state_out at each sequence's first step, inside the episode
            prev, cols = prev + 1, jnp.clip(L + prev + 1, 0, max(L + T - 1, 0))
            recorded = prev < episodes.lengths[:, None]
            out["next_state_in"] = jax.tree_util.tree_map(gather, states, init)
        return episodes, out

    return stateless(apply, lookback=1, role=STATES)  # the state_out of the step before


def frame_stack(num_frames: int) -> Connector:
    """RLlib's `FrameStacking`: each observation becomes the last `num_frames` observations
    concatenated along the last axis (oldest first), zeros before the episode's first available
    observation (lookback included). Box `(..., d)` -> `(..., d * num_frames)`: an image
    `(w, h, 1)` -> `(w, h, num_frames)` as in RLlib, a vector `(4,)` -> `(16,)`.

    It rewrites every observation column of the episodes, so the same piece serves both
    pipelines: the env-to-module one then reads the latest stacked observation, the learner
    one every step's.

    Args:
      num_frames: observations stacked, >= 1; the piece's `lookback` is `num_frames - 1`.

    Returns:
      The stateless piece, whose `out_spaces` widens the observation space's last axis.

    Raises:
      ValueError: `num_frames < 1`.
    """
    if num_frames < 1:
        raise ValueError(f"num_frames must be >= 1, got {num_frames}")

    def apply(state, episodes, batch, ctx):
        obs = episodes.observations
        if not isinstance(obs, jax.Array | np.ndarray):
            raise ValueError("frame_stack needs Box observations; flatten Dict/Tuple first")
        x = jnp.where(expand(episodes.obs_mask, obs), obs, zero_of(obs))
        # One zero pad in front; frame j (oldest first) of column c is padded column c + j.
        C = x.shape[1]
        padded = jnp.pad(x, [(0, 0), (num_frames - 1, 0)] + [(0, 0)] * (x.ndim - 2))
        stacked = jnp.concatenate([padded[:, j:j + C] for j in range(num_frames)], axis=-1)
        spec = stacked_spec(episodes.observation_space_spec, num_frames)
        return episodes.replace(observations=stacked, observation_space_spec=spec), batch, state

    return Connector(init=lambda spaces: (), apply=apply,
                     out_spaces=lambda s: s._replace(
                         observation=stacked_spec(s.observation, num_frames)),
                     lookback=num_frames - 1, name="frame_stack")


def stacked_spec(spec, k: int):
    """The Box spec of `k` stacked frames of `spec` along its last axis.

    Args:
      spec: one frame's Box spec (None: unknown).
      k: the frames stacked.

    Raises:
      ValueError: a spec that is no Box.
    """
    if spec is None:  # episodes recorded without a space: the shape speaks for itself
        return None
    if not isinstance(spec, sp.BoxSpec):
        raise ValueError(f"frame_stack needs Box observations, got {spec}; flatten first")
    shape = (*spec.shape[:-1], spec.shape[-1] * k)
    low = np.concatenate([np.asarray(spec.low).reshape(spec.shape)] * k, axis=-1).ravel()
    high = np.concatenate([np.asarray(spec.high).reshape(spec.shape)] * k, axis=-1).ravel()
    return sp.BoxSpec(shape, spec.dtype, tuple(low.tolist()), tuple(high.tolist()))


# ------------------------------------------------------------------------------ space trees


_LEAF_SPECS = (sp.BoxSpec, sp.DiscreteSpec, sp.MultiDiscreteSpec, sp.MultiBinarySpec)


def is_leaf_spec(s) -> bool:
    """True for the spec of one array (a Box, Discrete, MultiDiscrete or MultiBinary leaf).

    Args:
      s: a spec.
    """
    return isinstance(s, _LEAF_SPECS)


def spec_tree(spec):
    """The spec as a pytree with the structure of its data (Dict -> dict, Tuple -> tuple).

    Args:
      spec: the space's spec.
    """
    if isinstance(spec, sp.TupleSpec):
        return tuple(spec_tree(s) for s in spec.spaces)
    if isinstance(spec, sp.DictSpec):
        return {k: spec_tree(s) for k, s in spec.items()}
    return spec


def from_spec_tree(tree):
    """The inverse of `spec_tree`: dicts and tuples of leaf specs back into a space spec.

    Args:
      tree: the spec tree.
    """
    if isinstance(tree, tuple):
        return sp.TupleSpec(tuple(from_spec_tree(s) for s in tree))
    if isinstance(tree, dict):
        return sp.DictSpec(tuple(tree), tuple(from_spec_tree(s) for s in tree.values()))
    return tree


def map_leaves(fn, spec, *data):
    """`fn(leaf_spec, *leaf_data)` over the leaves of a space and its data.

    Args:
      fn: `fn(leaf_spec, *leaf_data)`.
      spec: the space's spec.
      *data: pytrees with the space's structure.
    """
    return jax.tree_util.tree_map(fn, spec_tree(spec), *data, is_leaf=is_leaf_spec)
