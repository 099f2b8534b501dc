"""Summaries and conversions of whole data sets (what `rljax-offline inspect/convert` run)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow.parquet as pq

from rljax_offline.data.files import resolve_files
from rljax_offline.data.reader import SkipReport, iter_episodes
from rljax_offline.data.writer import EpisodeWriter


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
    fs, path = files[0]
    schema = pq.read_schema(fs.open_input_file(path))
    r = np.asarray(returns, float)
    return {
        "files": len(files), "episodes": len(returns), "timesteps": int(np.sum(lengths)),
        "done_episodes": int(done),
        "episode_return_mean": float(r.mean()) if len(r) else None,
        "episode_return_min": float(r.min()) if len(r) else None,
        "episode_return_max": float(r.max()) if len(r) else None,
        "episode_len_mean": float(np.mean(lengths)) if lengths else None,
        "obs_shape": obs_shape, "action_shape": act_shape,
        "schema": {f.name: str(f.type) for f in schema},
        "skipped_files": [list(s) for s in skipped],
    }


def _leaves(tree):
    import jax

    return jax.tree_util.tree_leaves(tree)


def convert_dataset(input_: Any, output: str, *, to: str, input_read_schema: dict | None = None,
                    input_read_episodes: bool | None = None,
                    output_max_rows_per_file: int | None = None, **write_options) -> list[str]:
    """Converts tabular rows <-> episode rows (and SampleBatch JSON lines -> episodes).

    The input format is the opposite of `to` unless `input_read_episodes` says otherwise;
    `.json`/`.jsonl` inputs are read as RLlib's old SampleBatch JSON.
    """
    if to not in ("episodes", "tabular"):
        raise ValueError(f"to must be 'episodes' or 'tabular', got {to!r}")
    paths = [input_] if isinstance(input_, str) else list(input_)
    if all(str(p).endswith((".json", ".jsonl")) for p in paths):
        from rljax_offline.data.sample_batch_json import read_sample_batch_json

        episodes = (ep for p in paths for ep in read_sample_batch_json(p))
    else:
        if input_read_episodes is None:
            input_read_episodes = to == "tabular"
        episodes = iter_episodes(paths, input_read_episodes=input_read_episodes,
                                 input_read_schema=input_read_schema)
    with EpisodeWriter(output, output_write_episodes=to == "episodes",
                       output_max_rows_per_file=output_max_rows_per_file,
                       **write_options) as w:
        w.write_many(episodes)
    return w.close()
