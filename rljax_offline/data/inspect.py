"""Summaries and conversions of whole data sets (what `rljax-offline inspect/convert` run)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from rljax_offline import spaces as sp
from rljax_offline.data.files import resolve_files
from rljax_offline.data.reader import SkipReport, iter_episodes
from rljax_offline.data.validate import actions_outside_bounds
from rljax_offline.data.writer import EpisodeWriter
from rljax_offline.errors import OutputExistsError


def inspect_dataset(input_: Any, **read_options) -> dict:
    """Files, episodes, timesteps, return and length stats and the schema of a data set.

    `actions_outside_bounds` reports, per Box action column, how many steps hold an action
    outside the action space's bounds (data RLlib records: it clips only what it sends to the
    env) and how far beyond its bound the farthest one lies. Streams the episodes once, so it
    works on data sets larger than memory.
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


def _refuse_overlap(inputs: list, output: str) -> None:
    """`convert` must never write over or inside its own input."""
    if "://" in output:
        return
    out = os.path.realpath(output)
    for item in inputs:
        item = os.fspath(item)
        if "://" in item or any(c in item for c in "*?["):
            continue
        src = os.path.realpath(item)
        if out == src or out.startswith(src.rstrip(os.sep) + os.sep):
            raise OutputExistsError(f"output {output!r} is the input {item!r} or inside it; "
                                    "choose a folder outside the input")
        if os.path.isfile(out):
            raise OutputExistsError(f"output {output!r} is an existing file; the output is a "
                                    "folder")


def _leaves(tree):
    import jax

    return jax.tree_util.tree_leaves(tree)


def convert_dataset(input_: Any, output: str, *, to: str, input_read_schema: dict | None = None,
                    input_read_episodes: bool | None = None,
                    output_max_rows_per_file: int | None = None, on_bad_file: str = "raise",
                    skipped: SkipReport | None = None, **write_options) -> list[str]:
    """Converts tabular rows <-> episode rows (and SampleBatch JSON lines -> episodes).

    The input format is the opposite of `to` unless `input_read_episodes` says otherwise;
    `.json`/`.jsonl` inputs are read as RLlib's old SampleBatch JSON.
    """
    if to not in ("episodes", "tabular"):
        raise ValueError(f"to must be 'episodes' or 'tabular', got {to!r}")
    paths = [input_] if isinstance(input_, (str, os.PathLike)) else list(input_)
    _refuse_overlap(paths, os.fspath(output))
    paths = [os.fspath(p) for p in paths]
    if all(str(p).endswith((".json", ".jsonl")) for p in paths):
        from rljax_offline.data.sample_batch_json import read_sample_batch_json

        episodes = (ep for p in paths for ep in read_sample_batch_json(
            p, on_bad_file=on_bad_file, skipped=skipped))
    else:
        if input_read_episodes is None:
            input_read_episodes = to == "tabular"
        episodes = iter_episodes(paths, input_read_episodes=input_read_episodes,
                                 input_read_schema=input_read_schema, on_bad_file=on_bad_file,
                                 skipped=skipped)
    with EpisodeWriter(output, output_write_episodes=to == "episodes",
                       output_max_rows_per_file=output_max_rows_per_file,
                       **write_options) as w:
        w.write_many(episodes)
    return w.close()


def convert_minari(input_: Any, output: str, *, to: str, env: Any = None,
                   output_max_rows_per_file: int | None = None, **read_options) -> list[str]:
    """Converts between a Minari dataset and our Parquet formats (what `rljax-offline convert`
    runs when the input or the output is `minari:DATASET_ID`).

    `to="minari"` writes the episodes of `input_` (any `iter_episodes` input) as the Minari
    dataset `output`; `to="episodes"`/`"tabular"` writes a Minari input as Parquet under
    `output`. Returns the files written (for Minari: its data folder).
    """
    from rljax_offline.data.minari import _data_path, iter_minari_episodes, write_minari

    if to == "minari":
        episodes = iter_episodes(input_, **read_options)
        ds = write_minari(episodes, output, env=env)
        return [_data_path(ds.id if hasattr(ds, "id") else output)]
    if to not in ("episodes", "tabular"):
        raise ValueError(f"to must be 'episodes', 'tabular' or 'minari', got {to!r}")
    with EpisodeWriter(output, output_write_episodes=to == "episodes",
                       output_max_rows_per_file=output_max_rows_per_file) as writer:
        writer.write_many(iter_minari_episodes(input_))
    return writer.close()
