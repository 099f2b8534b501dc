"""RLlib's `MeanStdFilter` as a connector piece: running statistics of Box observations
(`RunningStats`, merged with Chan et al.'s parallel update) and the piece that pushes and
normalizes with them, in env-to-module or learner pipelines."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from rljax_offline import spaces as sp
from rljax_offline.connectors.common import (
    expand,
    from_spec_tree,
    is_leaf_spec,
    map_leaves,
    spec_tree,
)
from rljax_offline.connectors.core import Connector


class RunningStats(NamedTuple):
    """Count, mean and sum of squared deviations `m2` of one Box leaf's observations.

    Merged with Chan et al.'s parallel update, which is associative: exact for any split of
    the data (one at a time, per episode, per batch, per device), so `prefix_normalize` can
    scan episodes' totals in parallel. In float32 the mean keeps ~7 digits;
    with counts beyond ~1e7 the relative update `n / total` loses precision, so cast to
    float64 (`jax_enable_x64`) for longer runs.

    Attributes:
      count: how many observations were pushed.
      mean: their mean, shaped like one observation.
      m2: their sum of squared deviations from the mean.
    """

    count: jax.Array
    mean: jax.Array
    m2: jax.Array

    @property
    def std(self):
        """RLlib's `RunningStat.std`: sample std (`m2 / (n - 1)`); `|mean|` while `n <= 1`."""
        count = expand(self.count, self.mean)
        var = jnp.where(count > 1, self.m2 / jnp.maximum(count - 1, 1.0),
                        jnp.square(self.mean))
        return jnp.sqrt(var)


def init_stats(shape) -> RunningStats:
    """Empty float32 statistics of observations of `shape` (count 0).

    Args:
      shape: one observation's shape.
    """
    return RunningStats(jnp.zeros((), jnp.float32), jnp.zeros(shape, jnp.float32),
                        jnp.zeros(shape, jnp.float32))


def merge_stats(a: RunningStats, b: RunningStats) -> RunningStats:
    """The statistics of `a`'s data followed by `b`'s (Chan et al.); broadcasts over leading
    axes, so it is the combine function of an associative scan.

    Args:
      a: the statistics of the earlier data.
      b: the statistics of the later data.
    """
    total = a.count + b.count
    frac = expand(b.count / jnp.maximum(total, 1.0), a.mean)
    delta = b.mean - a.mean
    return RunningStats(total, a.mean + delta * frac,
                        a.m2 + b.m2 + jnp.square(delta) * expand(a.count, a.mean) * frac)


def prefix_normalize(stats: RunningStats, x, pushed, clip: float | None = 10.0,
                     axis_name: str | None = None) -> tuple[Any, RunningStats]:
    """Pushes the rows of `x` (`[B, C, *shape]`, episode-major) where `pushed` (`[B, C]`) is
    True into `stats`, in row order, and normalizes every row with the statistics as of that
    row (a pushed row's include its own push, as RLlib's `MeanStdFilter` pushes then
    normalizes). Returns the normalized rows and the final statistics. With `axis_name`
    (inside `shard_map` / `pmap`) the devices' rows count in device order.

    Each episode's totals come from two reductions; Chan's merge scans the `B` totals
    (associative scan, small); then one loop along time carries each episode's running sums
    and normalizes column by column. The loop reads and writes the `[B, C, ...]` arrays in
    place, column `c` at a time (`fori_loop` with dynamic slices): a `lax.scan` would need
    the data time-major: three full transposes (in, out, and back for the episodes), which
    slowed the CPU learner pipeline (see `benchmarks/connector_throughput.py` on the
    benchmarks page); an associative scan along time costs ~2 log2(C) full-size passes, and
    closed-form cumulative sums on XLA's CPU backend lower to the same.
    Sums are of deviations from the episode's first pushed row: centring keeps
    `sum(y^2) - sum(y)^2 / n` clear of the cancellation raw sums of squares suffer in float32,
    and centring on a pushed row keeps runs of equal values (zero padding of stacked frames)
    exactly at `m2 == 0`, as RLlib's one-by-one update does.

    Args:
      stats: the statistics before these rows.
      x: `[B, C, *shape]` rows, episode-major.
      pushed: `[B, C]` True for the rows to push.
      clip: normalized values are clipped to `[-clip, clip]` (None: not clipped).
      axis_name: the device axis under `shard_map` / `pmap` (None: one device).
    """
    xf = x.astype(jnp.float32)
    p = pushed.astype(jnp.float32)
    first = jnp.argmax(p, axis=1)                                    # first pushed column
    center = jnp.take_along_axis(xf, first.reshape(-1, 1, *([1] * (x.ndim - 2))), axis=1)[:, 0]
    y = (xf - center[:, None]) * expand(p, xf)
    count = jnp.sum(p, axis=1)
    s_tot, q_tot = jnp.sum(y, axis=1), jnp.sum(y * y, axis=1)
    inv = expand(1.0 / jnp.maximum(count, 1.0), center)
    totals = RunningStats(count, center + s_tot * inv,
                          jnp.maximum(q_tot - s_tot * s_tot * inv, 0.0))
    running = lax.associative_scan(merge_stats, totals)  # through episode b, inclusive
    earlier = jax.tree_util.tree_map(  # through episode b - 1: shift in an empty one
        lambda a: jnp.concatenate([jnp.zeros_like(a[:1]), a[:-1]]), running)
    before = stats
    local_total = jax.tree_util.tree_map(lambda a: a[-1], running)
    if axis_name is not None:
        device_totals = lax.all_gather(local_total, axis_name)  # [D, ...] in device order
        me = lax.axis_index(axis_name)
        earlier_devices = jnp.arange(device_totals.count.shape[0]) < me
        masked = device_totals._replace(
            count=jnp.where(earlier_devices, device_totals.count, 0.0))
        before = merge_stats(stats, _reduce_stats(masked))
        final = merge_stats(stats, _reduce_stats(device_totals))
    else:
        final = merge_stats(stats, local_total)
    before = merge_stats(jax.tree_util.tree_map(lambda a: a[None], before), earlier)  # [B]

    def column(c, carry):
        n, s, q, out = carry
        x_c = lax.dynamic_index_in_dim(xf, c, axis=1, keepdims=False)
        p_c = lax.dynamic_index_in_dim(p, c, axis=1, keepdims=False)
        y_c = (x_c - center) * expand(p_c, x_c)
        n, s, q = n + p_c, s + y_c, q + y_c * y_c
        inv_n = expand(1.0 / jnp.maximum(n, 1.0), x_c)
        within = RunningStats(n, center + s * inv_n, jnp.maximum(q - s * s * inv_n, 0.0))
        normalized = normalize(merge_stats(before, within), x_c, clip)
        return n, s, q, lax.dynamic_update_index_in_dim(out, normalized, c, axis=1)

    zero = jnp.zeros_like(center)
    *_, out = lax.fori_loop(0, x.shape[1], column,
                            (jnp.zeros_like(count), zero, zero, jnp.zeros_like(xf)))
    return (out.astype(x.dtype) if jnp.issubdtype(x.dtype, jnp.floating) else out), final


def _reduce_stats(stats: RunningStats) -> RunningStats:
    """The merge of a stack `[D, ...]` of statistics, in order."""
    scanned = lax.associative_scan(merge_stats, stats)
    return jax.tree_util.tree_map(lambda a: a[-1], scanned)


def normalize(stats: RunningStats, x, clip: float | None = 10.0, eps: float = 1e-6):
    """RLlib's `MeanStdFilter`: `(x - mean) / (std + 1e-6)`, clipped to `[-clip, clip]`.

    Args:
      stats: the statistics.
      x: the observations.
      clip: the bound of the normalized values (None: not clipped).
      eps: added to the std.
    """
    out = (x - stats.mean) / (stats.std + eps)
    out = out if clip is None else jnp.clip(out, -clip, clip)
    return out.astype(x.dtype) if jnp.issubdtype(x.dtype, jnp.floating) else out


def _filtered_spec(spec, clip):
    def leaf(s):
        if not isinstance(s, sp.BoxSpec) or clip is None:
            return s
        d = len(s.low)
        return sp.BoxSpec(s.shape, s.dtype, (-float(clip),) * d, (float(clip),) * d)

    return from_spec_tree(map_leaves(leaf, spec))


def mean_std_filter(update: bool = True, clip: float | None = 10.0,
                    as_learner_connector: bool = False,
                    axis_name: str | None = None) -> Connector:
    """RLlib's `MeanStdFilter`: normalizes Box observations (each Box leaf of a Dict/Tuple;
    Discrete leaves pass unchanged) by running mean and std kept in the state.

    Per-step semantics, as RLlib: observations are pushed one at a time in episode then time
    order, and each is normalized with the statistics as of its own push (so the first
    observation ever becomes 0); the normalized values are written back into the episodes, so
    later pieces (frame stacking) see what RLlib's see. `prefix_normalize` computes all these
    statistics inside `jit` (a parallel prefix over the episodes, running sums along time).

    Which observations are pushed: env-to-module (the default, RLlib's place for it), each
    episode's latest (`L + length`), as RLlib pushes each observation once when the env emits
    it; learner (`as_learner_connector=True`, explicit), every observation of each episode from
    its first step to its last (`L .. L + length`; none of an episode without steps, such as
    a batch's padding). In multi-agent pipelines rows whose `ctx.agent_index` is -1 (padding)
    push nothing on either side. Other columns (the lookback) are normalized
    with the statistics as of just before their episode's pushes (RLlib would hold the values
    normalized back then) - unless `ctx.written_back`: then they already hold what this piece
    wrote back at their own step (RLlib writes the normalized latest observation into its
    episode, `set_observations(at_indices=-1)`), pass through unchanged, and a frame stacking
    after the filter reads each past frame as normalized at its own step, as RLlib's. The
    env-to-module piece `writes_back` (`connectors.apply_writing_back` returns the episodes'
    observations so written; the actor keeps its window so while the statistics learn).
    `ctx.frozen` (e.g. at evaluation) or `update=False` push nothing and
    normalize with the given statistics. Pass `axis_name` inside `shard_map`/`pmap`: device
    d's episodes count after those of devices `< d`. The state (a pytree of `RunningStats`,
    one per Box leaf) is saved and restored with the learner's state.

    Args:
      update: push observations into the statistics (False: normalize with them only).
      clip: normalized values are clipped to `[-clip, clip]` (None: not clipped).
      as_learner_connector: push every step's observation (learner) instead of each episode's
        latest (env-to-module).
      axis_name: the device axis under `shard_map` / `pmap` (None: one device).

    Returns:
      The piece; its state is one `RunningStats` per Box leaf.
    """

    def init(spaces):
        spec = spaces.observation
        if spec is None or not any(isinstance(s, sp.BoxSpec) for s in
                                   jax.tree_util.tree_leaves(spec_tree(spec),
                                                             is_leaf=is_leaf_spec)):
            raise ValueError(f"mean_std_filter needs Box observations, got {spec}")
        return map_leaves(lambda s: init_stats(s.shape) if isinstance(s, sp.BoxSpec) else (),
                           spec)

    def pushed_mask(episodes, ctx):
        col = jnp.arange(episodes.len_lookback_buffer + episodes.max_len + 1)[None, :] \
            - episodes.len_lookback_buffer
        lengths = episodes.lengths[:, None]
        # Learner: an episode of no steps (the batch's padding) holds no row to learn from;
        # its one observation (zeros) must not enter the statistics.
        mask = ((col >= 0) & (col <= lengths) & (lengths > 0) if as_learner_connector
                else col == lengths)
        if ctx.agent_index is not None:  # multi-agent pipelines: -1 marks a padding row
            mask = mask & (jnp.asarray(ctx.agent_index) >= 0)[:, None]
        return mask & jnp.logical_not(jnp.asarray(ctx.frozen, bool)) & update

    def apply(state, episodes, batch, ctx):
        spec = episodes.observation_space_spec or _spec_of(episodes.observations)
        pushed = pushed_mask(episodes, ctx)
        # Known at trace time to push nothing (evaluation, export): normalize with the given
        # statistics, no prefix scan (which also needs a static batch size).
        static_frozen = not update or (isinstance(ctx.frozen, bool) and ctx.frozen)

        def leaf(s, stats, x):
            if not isinstance(s, sp.BoxSpec):
                return stats, x
            if static_frozen:
                return stats, normalize(stats, x, clip)
            normalized, stats = prefix_normalize(stats, x, pushed, clip, axis_name)
            return stats, normalized

        if not as_learner_connector:
            # RLlib's live episodes hold the past observations as written back at their step.
            col = jnp.arange(episodes.len_lookback_buffer + episodes.max_len + 1)[None, :]
            kept = (col < (episodes.len_lookback_buffer + episodes.lengths)[:, None]) & \
                jnp.asarray(ctx.written_back, bool)
            inner = leaf

            def leaf(s, stats, x):  # noqa: F811 - the lookback-keeping wrapper of `leaf`
                stats, normalized = inner(s, stats, x)
                if not isinstance(s, sp.BoxSpec):
                    return stats, normalized
                keep = kept.reshape(*kept.shape, *([1] * (x.ndim - 2)))
                return stats, jnp.where(keep, x.astype(normalized.dtype), normalized)

        pairs = map_leaves(leaf, spec, state, episodes.observations)
        state = map_leaves(lambda s, p: p[0], spec, pairs)
        obs = map_leaves(lambda s, p: p[1], spec, pairs)
        out_spec = None if episodes.observation_space_spec is None else _filtered_spec(spec, clip)
        return episodes.replace(observations=obs, observation_space_spec=out_spec), batch, state

    return Connector(init=init, apply=apply,
                     out_spaces=lambda s: s._replace(observation=_filtered_spec(s.observation,
                                                                                clip)),
                     writes_back=not as_learner_connector)


def _spec_of(obs: Any):
    """A stand-in Box spec for observations recorded without a space (a single array)."""
    if isinstance(obs, dict | tuple):
        raise ValueError("mean_std_filter needs the observation space of Dict/Tuple episodes")
    d = int(jnp.size(obs[0, 0]))
    return sp.BoxSpec(tuple(obs.shape[2:]), str(obs.dtype), (0.0,) * d, (0.0,) * d)
