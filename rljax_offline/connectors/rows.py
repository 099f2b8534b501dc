"""Episodes -> learner rows: the one step that runs a learner pipeline over whole episodes and
keeps the rows that hold data. Training (materialized and streamed data), PPO's and SAC's
rollouts, off-policy evaluation and PPO's value warm-up all call it.

Episodes go through the pipeline in length-bucketed `EpisodeBatch`es of at most 64 (padded to
a power of two of episodes: few shapes to compile, and a streamed chunk of 4 long episodes
does not become 64 episodes of padding); the padding rows are dropped. For a recurrent policy
the rows are the `max_seq_len` sequences that hold a step (`seq_lens > 0`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline.connectors.core import Context
from rljax_offline.episode.batch import EpisodeBatch
from rljax_offline.episode.episode import Episode

EPISODES_PER_BATCH = 64


def _batches(episodes: Sequence[Episode]) -> tuple[list, list, list[int]]:
    episodes = sorted(episodes, key=len)
    groups = [episodes[i:i + EPISODES_PER_BATCH]
              for i in range(0, len(episodes), EPISODES_PER_BATCH)]
    pads = [min(EPISODES_PER_BATCH, 1 << (len(g) - 1).bit_length()) for g in groups]
    batches = [EpisodeBatch.from_episodes(g, pad_batch_to=pad) for g, pad in zip(groups, pads)]
    return batches, groups, pads


def episode_rows(apply: Callable, episodes: Sequence[Episode], connector_state: Any,
                 columns: Sequence[str], *, fit: bool = False, params: Any = None,
                 on_device: bool = False, what: str = "the learner"
                 ) -> tuple[dict, Any, list[int] | None]:
    """The `columns` that the pipeline's `apply` (jitted or not) makes of `episodes`.

    Returns `(columns, connector_state, lengths)`: the rows holding data (on the default
    device when `on_device`, else on the host), the connector state (fitted on `episodes`
    first when `fit`; frozen while the rows are made), and each episode's row count in row
    order (episodes sorted by length; None where the pipeline's rows are not one block per
    episode, e.g. sequences). `params` reach the pieces through the context (on-policy pieces
    such as GAE read the value network). A column the pipeline does not make is a `KeyError`
    naming `what` reads it and what the pipeline makes.

    Args:
      apply: the pipeline's `apply` (jitted or not).
      episodes: the episodes to turn into rows.
      connector_state: the pipeline's state.
      columns: the columns to return.
      fit: fit the state on `episodes` first.
      params: module params, passed to the pieces through the context.
      on_device: keep the rows on the default device.
      what: who reads the columns, named by the `KeyError`.
    """
    batches, groups, pads = _batches(episodes)
    if fit and jax.tree_util.tree_leaves(connector_state):
        for eb in batches:
            _, _, connector_state = apply(connector_state, eb, {}, Context(params=params))
    cols: dict[str, list] = {k: [] for k in columns}
    lengths: list | None = []
    xp = jnp if on_device else np
    for eb, group, pad in zip(batches, groups, pads):
        _, batch, _ = apply(connector_state, eb, {}, Context(frozen=True, params=params))
        missing = [k for k in columns if k not in batch]
        if missing:
            raise KeyError(f"{what} reads columns {missing} that the learner pipeline does "
                           f"not make; it makes {sorted(batch)}")
        keep = np.asarray(batch["seq_lens"] > 0 if "seq_lens" in batch else batch["loss_mask"])
        rows = np.flatnonzero(keep)
        if lengths is not None and keep.size % pad == 0:
            per_episode = keep.reshape(pad, -1).sum(axis=1)[:len(group)]
            lengths.extend(int(c) for c in per_episode if c)
        else:
            lengths = None
        for k in columns:
            cols[k].append(jax.tree_util.tree_map(
                lambda x, rows=rows: xp.take(xp.asarray(x), rows, axis=0), batch[k]))
    out = {k: jax.tree_util.tree_map(lambda *xs: xp.concatenate(xs), *v)
           for k, v in cols.items()}
    return out, connector_state, lengths
