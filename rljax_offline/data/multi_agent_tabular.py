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


class _ModuleFile:
    """One module's open output file: rows buffered up to a row group, then written."""

    def __init__(self, fs, path: str, first: pa.Table, episode):
        self.path, self.pending, self.rows = path, [], 0
        meta = {**(first.schema.metadata or {}),
                **file_metadata("multi_agent_tabular", episode),
                (META_PREFIX + "multi_agent_schema").encode(): json.dumps(
                    {"format_version": FORMAT_VERSION, "kind": "tabular",
                     "columns": {f.name: str(f.type) for f in first.schema}}).encode()}
        self.schema = first.schema.with_metadata(meta)
        self.ctx = atomic_output(fs, path)
        self.writer = pq.ParquetWriter(self.ctx.__enter__(), self.schema,
                                       write_page_checksum=True)

    def add(self, table: pa.Table, module_id, row_group_rows: int) -> None:
        try:
            table = table.cast(self.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as e:
            raise OfflineDataError(f"module {module_id!r}: its agents' rows do not share one "
                                   f"schema (different spaces or model outputs?): {e}") from None
        self.pending.append(table)
        self.rows += table.num_rows
        if self.rows >= row_group_rows:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.writer.write_table(pa.concat_tables(self.pending))
            self.pending, self.rows = [], 0

    def close(self, exc: BaseException | None = None) -> None:
        if exc is None:
            self.flush()
            self.writer.close()
            self.ctx.__exit__(None, None, None)
            return
        try:
            self.writer.close()
        finally:
            self.ctx.__exit__(type(exc), exc, None)


def write_multi_agent_tabular(episodes: Iterable[MultiAgentEpisode], path: str, *,
                              filesystem=None, row_group_rows: int = 65536) -> list[str]:
    """Writes `<path>/<module_id>/ma_tabular_<run id>.parquet`, one atomic file per module,
    streamed row group by row group (`row_group_rows` agent steps are held per module).

    Each module's folder is a plain tabular data set (see the module docstring): the
    single-agent tabular readers read it, one episode per agent.

    Args:
      episodes: the multi-agent episodes (streamed: one is held at a time).
      path: the output folder.
      filesystem: a `pyarrow.fs.FileSystem` (default: inferred from `path`).
      row_group_rows: agent steps per module buffered before a row group is written.

    Returns:
      The files written.

    Raises:
      OfflineDataError: the agents of one module have rows of different schemas (other
        spaces or model outputs); no file of that call is left behind.
    """
    fs, root = _filesystem(path, filesystem, None)
    run = new_run_id()
    files: dict = {}
    try:
        for ep in episodes:
            order = sorted(ep.agent_episodes, key=str)
            for k, a in enumerate(order):
                sa = ep.agent_episodes[a]
                if len(sa) == 0:
                    continue
                table = agent_rows_table(ep, a, k)
                mid = sa.module_id
                if mid not in files:
                    files[mid] = _ModuleFile(fs, f"{root}/{mid}/ma_tabular_{run}.parquet",
                                             table, sa)
                files[mid].add(table, mid, row_group_rows)
    except BaseException as e:
        for f in files.values():
            f.close(e)
        raise
    for f in files.values():
        f.close()
    return [f.path for f in files.values()]
