"""Summaries of whole data sets (what `rljax-offline inspect` runs)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow.parquet as pq

from rljax_offline import spaces as sp
from rljax_offline.data.files import resolve_files
from rljax_offline.data.reader import SkipReport, iter_episodes
from rljax_offline.data.validate import actions_outside_bounds


def inspect_dataset(input_: Any, **read_options) -> dict:
    """Files, episodes, timesteps, return and length stats and the schema of a data set.

    `actions_outside_bounds` reports, per Box action column, how many steps hold an action
    outside the action space's bounds (data RLlib records: it clips only what it sends to the
    env) and how far beyond its bound the farthest one lies. Streams the episodes once, so it
    works on data sets larger than memory.

    Args:
      input_: what `iter_episodes` reads (files, folders, globs, URIs).
      **read_options: more `iter_episodes` options (`input_read_episodes=False` for tabular
        rows, ...).

    Returns:
      A JSON-ready dict of the figures (what `rljax-offline inspect` prints).
    """
    files = resolve_files(input_, filesystem=read_options.get("input_filesystem"),
                          filesystem_kwargs=read_options.get("input_filesystem_kwargs"))
    skipped = SkipReport()
    returns, lengths, done = [], [], 0
    obs_shape = act_shape = None
    outside: dict = {}
    act_space = read_options.get("action_space")
    for ep in iter_episodes(input_, skipped=skipped, **read_options):
        spec = sp.to_spec(act_space) or ep.action_space_spec
        if spec is not None:
            for column, (n, out, far) in actions_outside_bounds(ep.actions, spec).items():
                seen = outside.setdefault(column, [0, 0, 0.0])
                seen[0] += n
                seen[1] += out
                seen[2] = max(seen[2], far)
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
        "actions_outside_bounds": {
            column: {"steps": out, "fraction": out / n if n else 0.0, "max_distance": far}
            for column, (n, out, far) in outside.items()},
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
