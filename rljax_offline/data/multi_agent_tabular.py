"""The tabular multi-agent layout: one row per agent step, RLlib's tabular column names
(`eps_id` = the agent episode's id, `agent_id`, `module_id`, `obs`, `actions`, `rewards`,
`new_obs`, `terminateds`, `truncateds`, model outputs) plus `agent_index` (the agent's
position among the multi-agent episode's agents, sorted) and `env_t` (the env step of the
row's observation), one folder per module (agents of one module share their spaces, so a
file has one shape per column).

Each module's folder is a plain tabular data set: the single-agent tabular reader (ours, or
RLlib's with `input_read_episodes=False`) reads one episode per agent and keeps
`agent_index` and `env_t` as extra columns. It is a flat view for tools that want tables;
the hanging values and the env records live in the episode-row format
(`data.multi_agent_format`), which round-trips a `MultiAgentEpisode` exactly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from rljax_offline.data.files import META_PREFIX, _filesystem, atomic_output
from rljax_offline.data.tabular import episodes_to_table
from rljax_offline.data.writer import (
    FORMAT_VERSION,
    file_metadata,
    new_run_id,
    with_rllib_action_dtype,
)
from rljax_offline.episode.multi_agent import SKIP, MultiAgentEpisode
from rljax_offline.errors import OfflineDataError


def agent_rows_table(ep: MultiAgentEpisode, agent_id, agent_index: int) -> pa.Table:
    """One agent's steps as tabular rows with `agent_index` and `env_t`.

    Args:
      ep: the multi-agent episode.
      agent_id: the agent.
      agent_index: its position among the episode's agents, sorted.
    """
    sa = with_rllib_action_dtype(ep.agent_episodes[agent_id])
    n = len(sa)
    table = episodes_to_table([sa])
    entries, lookback = ep.env_t_to_agent_t[agent_id], ep.map_lookback[agent_id]
    env_of = {e: ep.env_t_started - lookback + i for i, e in enumerate(entries) if e != SKIP}
    env_t = [env_of[sa.t_started + j] for j in range(n)]
    for col, values in (("agent_id", [str(agent_id)] * n),
                        ("module_id", [None if sa.module_id is None else str(sa.module_id)]
                         * n)):
        table = table.set_column(table.schema.get_field_index(col), col,
                                 pa.array(values, pa.string()))
    table = table.append_column("agent_index", pa.array([agent_index] * n, pa.int64()))
    return table.append_column("env_t", pa.array(env_t, pa.int64()))


def write_multi_agent_tabular(episodes: Iterable[MultiAgentEpisode], path: str, *,
                              filesystem=None) -> list[str]:
    """Writes `<path>/<module_id>/ma_tabular_<run id>.parquet`, one atomic file per module;
    returns the files.

    Each module's folder is a plain tabular data set (see the module docstring): the
    single-agent tabular readers read it, one episode per agent.

    Args:
      episodes: the multi-agent episodes.
      path: the output folder.
      filesystem: a `pyarrow.fs.FileSystem` (default: inferred from `path`).

    Returns:
      The files written.
    """
    fs, root = _filesystem(path, filesystem, None)
    by_module: dict = {}
    first: dict = {}
    for ep in episodes:
        order = sorted(ep.agent_episodes, key=str)
        for k, a in enumerate(order):
            if len(ep.agent_episodes[a]) == 0:
                continue
            mid = ep.agent_episodes[a].module_id
            by_module.setdefault(mid, []).append(agent_rows_table(ep, a, k))
            first.setdefault(mid, ep.agent_episodes[a])
    files, run = [], new_run_id()
    for mid, tables in by_module.items():
        try:
            table = pa.concat_tables(tables)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise OfflineDataError(f"module {mid!r}: its agents' rows do not share one schema "
                                   f"(different spaces or model outputs?): {e}") from None
        meta = {**(table.schema.metadata or {}),
                **file_metadata("multi_agent_tabular", first[mid]),
                (META_PREFIX + "multi_agent_schema").encode(): json.dumps(
                    {"format_version": FORMAT_VERSION, "kind": "tabular",
                     "columns": {f.name: str(f.type) for f in table.schema}}).encode()}
        name = f"{root}/{mid}/ma_tabular_{run}.parquet"
        with atomic_output(fs, name) as stream:
            pq.write_table(table.replace_schema_metadata(meta), stream,
                           write_page_checksum=True)
        files.append(name)
    return files
