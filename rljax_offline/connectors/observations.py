"""Pieces that transform the observations of an `EpisodeBatch` in place of RLlib's episode
rewrites: flatten/one-hot, frame stacking, mean-std filtering. They act on every observation
column (lookback included), so the same piece serves the env-to-module pipeline (which then
reads the latest observation) and the learner pipeline (which reads every step).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from rljax_offline import spaces as sp
from rljax_offline.connectors.core import Connector


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


def needs_flattening(spec) -> bool:
    return not (isinstance(spec, sp.BoxSpec) and len(spec.shape) == 1)


def flatten_observations() -> Connector:
    """Dict/Tuple observations concatenated, Discrete/MultiDiscrete one-hot, Box flattened:
    the result is `Box(flat_dim,)` float32 (RLlib's `FlattenObservations`)."""

    def apply(state, episodes, batch, ctx):
        spec = episodes.observation_space_spec
        if spec is None:
            raise ValueError("flatten_observations needs the observation space on the episodes")
        obs = _flatten(episodes.observations, spec)
        return episodes.replace(observations=obs, observation_space_spec=_flat_box(spec)), \
            batch, state

    return Connector(init=lambda spaces: (), apply=apply,
                     out_spaces=lambda s: s._replace(observation=_flat_box(s.observation)))


def one_hot_observations() -> Connector:
    """Discrete observations as one-hot vectors (`Box(n,)`); the flatten piece's special case."""
    return flatten_observations()


def _flat_box(spec) -> sp.BoxSpec:
    d = sp.flat_dim(spec)
    if isinstance(spec, sp.BoxSpec):
        return sp.BoxSpec((d,), "float32", spec.low, spec.high)
    if isinstance(spec, (sp.DiscreteSpec, sp.MultiDiscreteSpec)):
        return sp.BoxSpec((d,), "float32", (0.0,) * d, (1.0,) * d)
    lows, highs = [], []
    for s in spec.spaces:
        b = _flat_box(s)
        lows += list(b.low)
        highs += list(b.high)
    return sp.BoxSpec((d,), "float32", tuple(lows), tuple(highs))


def frame_stack(num_frames: int) -> Connector:
    """Each observation becomes the last `num_frames` observations concatenated along the last
    axis (oldest first), zeros before the episode's first available observation (RLlib's
    `FrameStacking`). Box `(d,)` -> `(d * num_frames,)`."""
    if num_frames < 1:
        raise ValueError(f"num_frames must be >= 1, got {num_frames}")

    def apply(state, episodes, batch, ctx):
        obs = episodes.observations
        valid = episodes.obs_mask  # [B, C]
        x = jnp.where(valid.reshape(*valid.shape, *([1] * (obs.ndim - 2))), obs, 0)
        frames = []
        for k in range(num_frames - 1, -1, -1):
            shifted = jnp.pad(x, [(0, 0), (k, 0)] + [(0, 0)] * (x.ndim - 2))[:, :x.shape[1]]
            frames.append(shifted)
        stacked = jnp.concatenate(frames, axis=-1)
        spec = _stacked_spec(episodes.observation_space_spec, num_frames)
        return episodes.replace(observations=stacked, observation_space_spec=spec), batch, state

    return Connector(init=lambda spaces: (), apply=apply,
                     out_spaces=lambda s: s._replace(
                         observation=_stacked_spec(s.observation, num_frames)))


def _stacked_spec(spec, k):
    if spec is None:  # episodes recorded without a space: the shape speaks for itself
        return None
    if not isinstance(spec, sp.BoxSpec):
        raise ValueError(f"frame_stack needs Box observations, got {spec}; flatten first")
    shape = (*spec.shape[:-1], spec.shape[-1] * k)
    low = np.tile(np.asarray(spec.low).reshape(spec.shape), k).ravel()
    high = np.tile(np.asarray(spec.high).reshape(spec.shape), k).ravel()
    return sp.BoxSpec(shape, spec.dtype, tuple(low.tolist()), tuple(high.tolist()))


class RunningStats(NamedTuple):
    """Running mean and sum of squared deviations (Chan et al.'s parallel update): exact for
    any split of the data, stable in float32 for counts up to ~1e7 (beyond, use float64)."""

    count: jax.Array
    mean: jax.Array
    m2: jax.Array


def init_stats(shape) -> RunningStats:
    return RunningStats(jnp.zeros((), jnp.float32), jnp.zeros(shape, jnp.float32),
                        jnp.zeros(shape, jnp.float32))


def update_stats(stats: RunningStats, x, mask, axis_name: str | None = None) -> RunningStats:
    """Merges the rows of `x` (`[N, *shape]`) where `mask` is True into `stats`."""
    m = mask.astype(jnp.float32).reshape(-1, *([1] * (x.ndim - 1)))
    n = jnp.sum(mask.astype(jnp.float32))
    s = jnp.sum(x * m, axis=0)
    if axis_name is not None:
        n, s = lax.psum(n, axis_name), lax.psum(s, axis_name)
    bmean = s / jnp.maximum(n, 1.0)
    sq = jnp.sum(((x - bmean) ** 2) * m, axis=0)
    if axis_name is not None:
        sq = lax.psum(sq, axis_name)
    total = stats.count + n
    delta = bmean - stats.mean
    mean = stats.mean + delta * n / jnp.maximum(total, 1.0)
    m2 = stats.m2 + sq + delta**2 * stats.count * n / jnp.maximum(total, 1.0)
    return RunningStats(total, mean, m2)


def normalize(stats: RunningStats, x, clip: float = 10.0, eps: float = 1e-8):
    std = jnp.sqrt(stats.m2 / jnp.maximum(stats.count, 1.0))
    std = jnp.where(stats.count > 1, std, 1.0)
    return jnp.clip((x - stats.mean) / (std + eps), -clip, clip)


def mean_std_filter(update: bool = True, clip: float = 10.0,
                    axis_name: str | None = None) -> Connector:
    """Normalizes Box observations by running mean/std (RLlib's `MeanStdFilter`).

    The state holds the statistics. With `update=True` the real observations of the batch
    (padding excluded) are merged in first, unless `ctx.frozen` is set (evaluation, or
    re-applying a fitted filter); `update=False` never changes them. Pass
    `axis_name` inside `shard_map`/`pmap` to merge statistics across devices.
    """

    def init(spaces):
        if not isinstance(spaces.observation, sp.BoxSpec):
            raise ValueError("mean_std_filter needs Box observations; flatten first")
        return init_stats(spaces.observation.shape)

    def apply(state, episodes, batch, ctx):
        obs = episodes.observations
        if update:
            B, C = obs.shape[:2]
            new = update_stats(state, obs.reshape(B * C, *obs.shape[2:]),
                               episodes.obs_mask.reshape(-1), axis_name)
            frozen = jnp.asarray(ctx.frozen, bool)
            state = jax.tree_util.tree_map(lambda old, n: jnp.where(frozen, old, n), state, new)
        out = normalize(state, obs, clip)
        return episodes.replace(observations=out), batch, state

    return Connector(init=init, apply=apply, out_spaces=lambda s: s)
