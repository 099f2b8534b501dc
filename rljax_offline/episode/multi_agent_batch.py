"""Multi-agent episodes as per-module padded batches, and RLlib's per-agent sample batches.

`module_batches(episodes)` groups the agent episodes of many `MultiAgentEpisode`s by module id
and pads each group into one `EpisodeBatch` (bucketed length, and with `pad_batch_to` a
bucketed batch size), so a jitted learner sees one array shape per module and bucket whatever
agents took part: it compiles a few times, not once per agent set.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from rljax_offline.episode.batch import EpisodeBatch, bucket_length
from rljax_offline.episode.episode import Episode
from rljax_offline.episode.multi_agent import MultiAgentEpisode
from rljax_offline.episode.multi_agent_chunks import align_extra_model_outputs
from rljax_offline.errors import MultiAgentEpisodeError


def agent_episodes_by_module(episodes: Iterable[MultiAgentEpisode]) -> dict:
    """`{module_id: [Episode, ...]}` over all agents of all episodes, in order.

    Args:
      episodes: the multi-agent episodes.
    """
    out: dict = {}
    for ma in episodes:
        if not isinstance(ma, MultiAgentEpisode):
            raise MultiAgentEpisodeError(f"expected MultiAgentEpisode, got {type(ma).__name__}")
        for a, ep in ma.agent_episodes.items():
            mid = ep.module_id if ep.module_id is not None else ma.module_for(a)
            out.setdefault(mid, []).append(ep)
    return out


def module_batches(episodes: Iterable[MultiAgentEpisode], *, bucket: str | None = "pow2",
                   bucket_batch_size: bool = True,
                   rows: int | None = None) -> dict[object, EpisodeBatch]:
    """`{module_id: EpisodeBatch}`: each module's agent episodes padded together.

    With `bucket_batch_size`, the number of rows is rounded up to a power of two as well
    (empty rows, `lengths == 0`), so batches with different agent sets share a few shapes;
    `rows` fixes it (one shape per length bucket). Agents of one module that have not acted
    yet get empty model-output columns, so every row has the same columns.

    Args:
      episodes: the multi-agent episodes; their agent episodes are grouped by module id
        (an agent episode's own `module_id`, else the episode's mapping).
      bucket: the length bucketing of `EpisodeBatch.from_episodes` ("pow2" or None).
      bucket_batch_size: round each module's number of rows up to a power of two.
      rows: a fixed number of rows per module (overrides `bucket_batch_size`).

    Returns:
      module id -> that module's `EpisodeBatch`.

    Raises:
      MultiAgentEpisodeError: an item is no `MultiAgentEpisode`, or one module's agent
        episodes differ in structure, shapes or dtypes.
    """
    out = {}
    for mid, eps in agent_episodes_by_module(episodes).items():
        # agents that have not acted yet have no model-output columns: give them empty ones
        ref = max(eps, key=lambda e: len(e.extra_model_outputs))
        eps = [align_extra_model_outputs(e, ref) for e in eps]
        n_rows = rows if rows is not None else (
            bucket_length(len(eps), "pow2", 1) if bucket_batch_size else None)
        try:
            out[mid] = EpisodeBatch.from_episodes(eps, bucket=bucket, pad_batch_to=n_rows)
        except Exception as e:
            raise MultiAgentEpisodeError(f"module {mid!r}: its agents' episodes cannot be "
                                         f"batched together: {e}") from e
    return out


def agent_sample_batch(ep: Episode) -> dict:
    """RLlib's `SingleAgentEpisode.get_sample_batch()` columns of one agent episode.

    Args:
      ep: one agent's `Episode`.
    """
    n = len(ep)
    obs = np.asarray(ep.get_observations(slice(0, n)))
    new_obs = np.asarray(ep.get_observations(slice(1, n + 1)))
    terminateds = np.zeros(n, bool)
    truncateds = np.zeros(n, bool)
    if n:
        terminateds[-1], truncateds[-1] = ep.is_terminated, ep.is_truncated
    batch = {"obs": obs, "new_obs": new_obs, "actions": np.asarray(ep.get_actions()),
             "rewards": np.asarray(ep.get_rewards()), "terminateds": terminateds,
             "truncateds": truncateds, "t": np.arange(ep.t_started, ep.t_started + n),
             "eps_id": np.asarray([ep.id_] * n), "agent_index": np.asarray([ep.agent_id] * n)}
    for k in ep.extra_model_outputs:
        batch[k] = np.asarray(ep.get_extra_model_outputs(k))
    return batch
