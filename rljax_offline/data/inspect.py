"""Summaries of whole data sets (what `rljax-offline inspect` runs)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow.parquet as pq

from rljax_offline.data.files import resolve_files
from rljax_offline.data.reader import SkipReport, iter_episodes


def inspect_dataset(input_: Any, **read_options) -> dict:
    """Files, episodes, timesteps, return and length stats and the schema of a data set.

    Streams the episodes once, so it works on data sets larger than memory.
    """
    files = resolve_files(input_, filesystem=read_options.get("input_filesystem"),
                          filesystem_kwargs=read_options.get("input_filesystem_kwargs"))
    skipped = SkipReport()
    returns, lengths, done = [], [], 0
    obs_shape = act_shape = None
    for ep in iter_episodes(input_, skipped=skipped, **read_options):
        returns.append(ep.get_return())
        lengths.append(len(ep))
        done += ep.is_done
        if obs_shape is None:
            obs_shape = [list(np.shape(x)[1:]) for x in _leaves(ep.observations)]
            act_shape = [list(np.shape(x)[1:]) for x in _leaves(ep.actions)]
    bad = {f for f, _ in skipped}
    schema = _first_schema([(fs, p) for fs, p in files if p not in bad and
                            not any(b.endswith(p) for b in bad)])
    r = np.asarray(returns, float)
    return {
        "files": len(files), "episodes": len(returns), "timesteps": int(np.sum(lengths)),
        "done_episodes": int(done),
        "episode_return_mean": float(r.mean()) if len(r) else None,
        "episode_return_min": float(r.min()) if len(r) else None,
        "episode_return_max": float(r.max()) if len(r) else None,
        "episode_len_mean": float(np.mean(lengths)) if lengths else None,
        "obs_shape": obs_shape, "action_shape": act_shape,
        "schema": {f.name: str(f.type) for f in schema} if schema is not None else None,
        "skipped_files": [list(s) for s in skipped],
        "dropped_episodes": len(skipped.dropped_episodes),
    }


def _first_schema(files):
    """The Arrow schema of the first file that can be read (None when none can)."""
    for fs, path in files:
        try:
            return pq.read_schema(fs.open_input_file(path))
        except Exception:  # noqa: BLE001 - a damaged file was already reported or skipped
            continue
    return None


def _leaves(tree):
    import jax

    return jax.tree_util.tree_leaves(tree)
