"""Summaries of multi-agent data sets (what `rljax-offline inspect` prints for them): whole
episodes, then one summary per module and per agent.

Two layouts are recognised: the episode-row format (`data.multi_agent_format`: a folder with
`agents/` and `env/`) and the tabular one (`data.multi_agent_tabular`: one folder per module
of files whose metadata says `multi_agent_tabular`). Episode rows are streamed one
multi-agent episode at a time; tabular files are read a few columns at a time, so both work
on data sets larger than memory.

Example:
    >>> import tempfile
    >>> from rljax_offline.data.multi_agent_io import write_multi_agent_episodes
    >>> from rljax_offline.episode.multi_agent_builder import MultiAgentEpisodeBuilder
    >>> b = MultiAgentEpisodeBuilder("ep0")
    >>> b.add_env_reset(observations={"a": 0.0, "b": 1.0})
    >>> b.add_env_step({"a": 1.0, "b": 2.0}, {"a": 0, "b": 1}, {"a": 1.0, "b": 0.5})
    >>> folder = tempfile.mkdtemp()
    >>> _ = write_multi_agent_episodes([b.finalize()], folder)
    >>> s = inspect_multi_agent(folder)
    >>> s["episodes"], s["agent_steps"], s["agents"]["b"]["return_mean"]
    (1, 2, 0.5)
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from rljax_offline.data.files import (
    META_PREFIX,
    _filesystem,
    as_data_error,
    display_name,
    open_parquet,
    resolve_files,
)
from rljax_offline.data.multi_agent_io import iter_multi_agent_episodes
from rljax_offline.errors import OfflineDataError

__all__ = ["inspect_multi_agent", "inspect_multi_agent_tabular", "is_multi_agent_dataset",
           "multi_agent_tabular_files"]

_TABULAR_LAYOUT = "multi_agent_tabular"


def is_multi_agent_dataset(path: Any, filesystem: Any = None) -> bool:
    """Whether `path` is a folder of the multi-agent episode-row format (it has an
    `agents/` sub-folder with Parquet files and an `env/` one).

    Args:
      path: a folder (local path or URI); anything else answers False.
      filesystem: a pyarrow filesystem for `path`.
    """
    if not isinstance(path, str):
        return False
    fs, root = _filesystem(path, filesystem, None)
    kinds = [fs.get_file_info(f"{root.rstrip('/')}/{sub}").type for sub in ("agents", "env")]
    if any(k != pafs.FileType.Directory for k in kinds):
        return False
    found = fs.get_file_info(pafs.FileSelector(f"{root.rstrip('/')}/agents"))
    return any(i.path.endswith(".parquet") for i in found)


def _layout(fs: Any, path: str) -> str | None:
    try:
        meta = pq.read_schema(fs.open_input_file(path)).metadata or {}
    except Exception:  # noqa: BLE001 - a damaged file is no multi-agent file; its reader names it
        return None
    return (meta.get((META_PREFIX + "layout").encode()) or b"").decode() or None


def multi_agent_tabular_files(input_: Any) -> list[tuple[Any, str]]:
    """The `(filesystem, path)` of every file under `input_` when all of them are multi-agent
    tabular files (`write_multi_agent_tabular`), else `[]`.

    Args:
      input_: files, folders, globs or URIs, as the readers take them.
    """
    try:
        files = resolve_files(input_)
    except OfflineDataError:
        return []
    if files and all(_layout(fs, p) == _TABULAR_LAYOUT for fs, p in files):
        return files
    return []


def _stats(values: list) -> dict:
    r = np.asarray(values, float)
    return {"mean": float(r.mean()) if len(r) else None,
            "min": float(r.min()) if len(r) else None,
            "max": float(r.max()) if len(r) else None}


def _shapes(tree: Any) -> list:
    import jax

    return [list(np.shape(x)[1:]) for x in jax.tree_util.tree_leaves(tree)]


def inspect_multi_agent(path: str, *, filesystem: Any = None) -> dict:
    """Episodes, env and agent steps, returns, and per-module and per-agent summaries of a
    multi-agent episode-row data set.

    Args:
      path: the data set's folder (with `agents/` and `env/`).
      filesystem: a pyarrow filesystem for `path`.

    Returns:
      A JSON-able dict: `episodes`, `env_steps`, `agent_steps`, `done_episodes`,
      `episodes_with_global_state`, `episode_return_{mean,min,max}` (sum over agents),
      `modules` (`{module_id: {agents, agent_episodes, agent_steps, return_mean, obs_shape,
      action_shape, model_outputs}}`), `agents` (`{agent_id: {module_id, agent_episodes,
      agent_steps, return_mean, terminated, truncated}}`) and the agents files' `schema`.
    """
    returns, env_steps, agent_steps, done, with_state = [], 0, 0, 0, 0
    modules: dict = {}
    agents: dict = {}
    for ep in iter_multi_agent_episodes(path, filesystem=filesystem):
        returns.append(ep.get_return())
        env_steps += len(ep)
        agent_steps += ep.agent_steps()
        done += ep.is_done
        with_state += ep.custom_data.get("global_state") is not None
        for a, sa in ep.agent_episodes.items():
            mid = str(sa.module_id if sa.module_id is not None else ep.module_for(a))
            m = modules.setdefault(mid, {"agents": set(), "agent_episodes": 0, "agent_steps": 0,
                                         "returns": [], "obs_shape": _shapes(sa.observations),
                                         "action_shape": _shapes(sa.actions),
                                         "model_outputs": set()})
            m["agents"].add(str(a))
            m["agent_episodes"] += 1
            m["agent_steps"] += len(sa)
            m["returns"].append(float(sa.get_return()))
            m["model_outputs"].update(sa.extra_model_outputs)
            g = agents.setdefault(str(a), {"module_id": mid, "agent_episodes": 0,
                                           "agent_steps": 0, "returns": [], "terminated": 0,
                                           "truncated": 0})
            g["agent_episodes"] += 1
            g["agent_steps"] += len(sa)
            g["returns"].append(float(sa.get_return()))
            g["terminated"] += sa.is_terminated
            g["truncated"] += sa.is_truncated
    fs, root = _filesystem(path, filesystem, None)
    agent_files = sorted(i.path for i in fs.get_file_info(
        pafs.FileSelector(f"{root.rstrip('/')}/agents")) if i.path.endswith(".parquet"))
    stats = _stats(returns)
    return {
        "format": "multi_agent_episodes", "files": len(agent_files), "episodes": len(returns),
        "env_steps": env_steps, "agent_steps": agent_steps, "done_episodes": done,
        "episodes_with_global_state": with_state,
        **{f"episode_return_{k}": v for k, v in stats.items()},
        "modules": {mid: {"agents": sorted(m["agents"]), "agent_episodes": m["agent_episodes"],
                          "agent_steps": m["agent_steps"],
                          "return_mean": _stats(m["returns"])["mean"],
                          "obs_shape": m["obs_shape"], "action_shape": m["action_shape"],
                          "model_outputs": sorted(m["model_outputs"])}
                    for mid, m in sorted(modules.items())},
        "agents": {a: {k: v for k, v in g.items() if k != "returns"}
                   | {"return_mean": _stats(g["returns"])["mean"]}
                   for a, g in sorted(agents.items())},
        "schema": _schema(fs, agent_files),
    }


def _schema(fs: Any, files: list[str]) -> dict | None:
    if not files:
        return None
    schema = open_parquet(fs, files[0]).schema_arrow
    return {f.name: str(f.type) for f in schema}


def inspect_multi_agent_tabular(files: list[tuple[Any, str]]) -> dict:
    """Per-module and per-agent summaries of multi-agent tabular files (from
    `multi_agent_tabular_files`): agent steps, agent episodes (`eps_id`s) and returns.

    Args:
      files: `(filesystem, path)` pairs of multi-agent tabular files.
    """
    modules: dict = {}
    agents: dict = {}
    cols = ["eps_id", "agent_id", "module_id", "rewards"]
    for fs, path in files:
        name = display_name(fs, path)
        try:
            table = open_parquet(fs, path).read(columns=cols)
        except OfflineDataError:
            raise
        except Exception as e:  # noqa: BLE001 (pyarrow raises many types for a damaged file)
            raise as_data_error(e, name) from None
        for row in table.group_by(["module_id", "agent_id", "eps_id"]).aggregate(
                [("rewards", "sum"), ("rewards", "count")]).to_pylist():
            mid, a = str(row["module_id"]), str(row["agent_id"])
            m = modules.setdefault(mid, {"agents": set(), "agent_episodes": 0,
                                         "agent_steps": 0, "returns": []})
            g = agents.setdefault(a, {"module_id": mid, "agent_episodes": 0, "agent_steps": 0,
                                      "returns": []})
            for d in (m, g):
                d["agent_episodes"] += 1
                d["agent_steps"] += int(row["rewards_count"])
                d["returns"].append(float(row["rewards_sum"]))
            m["agents"].add(a)
    fs0, p0 = files[0]
    meta = pq.read_schema(fs0.open_input_file(p0)).metadata or {}
    columns = json.loads(meta.get((META_PREFIX + "multi_agent_schema").encode(), b"{}") or "{}")
    return {
        "format": "multi_agent_tabular", "files": len(files),
        "agent_steps": sum(m["agent_steps"] for m in modules.values()),
        "agent_episodes": sum(m["agent_episodes"] for m in modules.values()),
        "modules": {mid: {"agents": sorted(m["agents"]), "agent_episodes": m["agent_episodes"],
                          "agent_steps": m["agent_steps"],
                          "return_mean": _stats(m["returns"])["mean"]}
                    for mid, m in sorted(modules.items())},
        "agents": {a: {"module_id": g["module_id"], "agent_episodes": g["agent_episodes"],
                       "agent_steps": g["agent_steps"],
                       "return_mean": _stats(g["returns"])["mean"]}
                   for a, g in sorted(agents.items())},
        "schema": columns.get("columns"),
    }
