"""RLlib's `MeanStdFilter(multi_agent=True)`: one set of running statistics per agent, for
the rows of a module's batch that belong to several agents.

In a multi-agent pipeline each module's batch holds the agent episodes of every agent mapped
to it, one `EpisodeBatch` row each, and `ctx.agent_index` says whose row is whose. The plain
`mean_std_filter` in a module's pipeline keeps statistics per module (all its agents'
observations together); this piece keeps them per agent, as RLlib's multi-agent filter does
(its filters are keyed by agent id): agent k's observations are pushed into statistics k only
and normalized with them, in the same per-step order as the single-agent filter (episode then
time order, each observation with the statistics as of its own push). The state is the
single-agent filter's state with a leading axis of `num_agents`.

Example:
    >>> import numpy as np
    >>> from rljax_offline.connectors import Context, Spaces
    >>> from rljax_offline.episode.batch import EpisodeBatch
    >>> from rljax_offline.episode.episode import Episode
    >>> import gymnasium as gym
    >>> box = gym.spaces.Box(-10, 10, (1,), np.float32)
    >>> eps = [Episode(observations=np.full((3, 1), v, np.float32), actions=np.zeros(2),
    ...                rewards=np.zeros(2), observation_space=box) for v in (1.0, 5.0)]
    >>> f = mean_std_filter_per_agent(2, as_learner_connector=True)
    >>> state = f.init(Spaces.of(box, None))
    >>> _, _, state = f.apply(state, EpisodeBatch.from_episodes(eps), {},
    ...                       Context(agent_index=np.array([0, 1])))
    >>> state.mean.ravel().tolist(), state.count.tolist()
    ([1.0, 5.0], [3.0, 3.0])
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rljax_offline import spaces as sp
from rljax_offline.connectors.common import expand, is_leaf_spec, map_leaves, spec_tree
from rljax_offline.connectors.core import Connector
from rljax_offline.connectors.mean_std import (
    RunningStats,
    _filtered_spec,
    _spec_of,
    init_stats,
    normalize,
    prefix_normalize,
)
from rljax_offline.errors import ConfigError

__all__ = ["mean_std_filter_per_agent"]


def _row_stats(stats: RunningStats, index, x) -> RunningStats:
    """Each row's agent's statistics, shaped to broadcast against `x` `[B, C, *shape]`."""
    rows = jax.tree_util.tree_map(lambda a: a[index], stats)  # [B, ...]
    return RunningStats(rows.count.reshape(-1, 1), rows.mean[:, None], rows.m2[:, None])


def mean_std_filter_per_agent(num_agents: int, update: bool = True,
                              clip: float | None = 10.0, as_learner_connector: bool = False,
                              axis_name: str | None = None) -> Connector:
    """`mean_std_filter` with statistics per agent (RLlib's `multi_agent=True`).

    Args:
      num_agents: how many agent indices `ctx.agent_index` may hold (`0 .. num_agents-1`).
      update: push observations into the statistics (False: normalize only).
      clip: clip normalized values to `[-clip, clip]` (None: no clipping).
      as_learner_connector: push every observation of each agent episode (learner) instead
        of each one's latest (env-to-module), as `mean_std_filter`.
      axis_name: the device axis inside `shard_map` / `pmap` (devices' rows count in device
        order).
    """
    if num_agents < 1:
        raise ConfigError(f"num_agents must be >= 1, got {num_agents}")

    def init(spaces):
        spec = spaces.observation
        if spec is None or not any(isinstance(s, sp.BoxSpec) for s in
                                   jax.tree_util.tree_leaves(spec_tree(spec),
                                                             is_leaf=is_leaf_spec)):
            raise ConfigError(f"mean_std_filter_per_agent needs Box observations, got {spec}")
        return map_leaves(lambda s: jax.tree_util.tree_map(
            lambda a: jnp.stack([a] * num_agents), init_stats(s.shape))
            if isinstance(s, sp.BoxSpec) else (), spec)

    def pushed_mask(episodes, ctx):
        col = jnp.arange(episodes.len_lookback_buffer + episodes.max_len + 1)[None, :] \
            - episodes.len_lookback_buffer
        lengths = episodes.lengths[:, None]
        mask = ((col >= 0) & (col <= lengths) & (lengths > 0) if as_learner_connector
                else col == lengths)
        return mask & jnp.logical_not(jnp.asarray(ctx.frozen, bool)) & update

    def apply(state, episodes, batch, ctx):
        spec = episodes.observation_space_spec or _spec_of(episodes.observations)
        rows = episodes.lengths.shape[0]
        index = jnp.zeros(rows, jnp.int32) if ctx.agent_index is None else \
            jnp.asarray(ctx.agent_index, jnp.int32)
        pushed = pushed_mask(episodes, ctx)
        mine = index[None, :] == jnp.arange(num_agents)[:, None]          # [A, B]
        per_agent = pushed[None] & mine[:, :, None]                       # [A, B, C]
        static_frozen = not update or (isinstance(ctx.frozen, bool) and ctx.frozen)
        col = jnp.arange(episodes.len_lookback_buffer + episodes.max_len + 1)[None, :]
        kept = (col < (episodes.len_lookback_buffer + episodes.lengths)[:, None]) & \
            jnp.asarray(ctx.written_back, bool) & (not as_learner_connector)

        def leaf(s, stats, x):
            if not isinstance(s, sp.BoxSpec):
                return stats, x
            if static_frozen:
                out = normalize(_row_stats(stats, index, x), x, clip)
            else:
                outs, stats = jax.vmap(
                    lambda st, p: prefix_normalize(st, x, p, clip, axis_name))(stats, per_agent)
                out = outs[index, jnp.arange(rows)]
            return stats, jnp.where(expand(kept, x), x.astype(out.dtype), out)

        pairs = map_leaves(leaf, spec, state, episodes.observations)
        state = map_leaves(lambda s, p: p[0], spec, pairs)
        obs = map_leaves(lambda s, p: p[1], spec, pairs)
        out_spec = None if episodes.observation_space_spec is None else \
            _filtered_spec(spec, clip)
        return episodes.replace(observations=obs, observation_space_spec=out_spec), batch, state

    return Connector(init=init, apply=apply,
                     out_spaces=lambda s: s._replace(observation=_filtered_spec(s.observation,
                                                                                clip)),
                     writes_back=not as_learner_connector, name="mean_std_filter_per_agent")
