"""Conversions between the in-memory forms of offline data: episodes <-> RLlib's tabular rows
(`pyarrow.Table`, one timestep a row) and RLlib's old `SampleBatch` JSON lines -> episodes.

These are the table-level halves of what the reader and writer stream file by file; use them
for data already in memory (or `rljax_offline.data.convert_dataset` for whole data sets).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from rljax_offline.data.sample_batch_json import read_sample_batch_json
from rljax_offline.data.tabular import _Assembler, _table_columns, episodes_to_table
from rljax_offline.episode.episode import Episode

__all__ = ["episodes_to_tabular", "read_sample_batch_json", "tabular_to_episodes"]


def episodes_to_tabular(episodes: Iterable[Episode], *,
                        output_compress_columns: list[str] | None = None) -> pa.Table:
    """Episodes as RLlib's tabular rows (`eps_id`, `obs`, `actions`, `rewards`, `new_obs`,
    `terminateds`, `truncateds`, then extra model outputs), lookback excluded.

    Fixed-size observations become Arrow fixed-size lists (the per-row shape in the field
    metadata, as Ray's tensor columns carry it); columns named in `output_compress_columns`
    are stored as RLlib's `base64(lz4(pickle))` strings.
    """
    return episodes_to_table(list(episodes), compress_columns=output_compress_columns)


def tabular_to_episodes(tables: pa.Table | Iterable[pa.Table], *,
                        input_read_schema: dict | None = None, observation_space: Any = None,
                        name: str = "<table>") -> list[Episode]:
    """Groups tabular rows into episodes by `eps_id`, in time order.

    Rows of several episodes may be interleaved and an episode may continue in the next
    table (as over RLlib's files); an episode ends at its row with `terminateds` or
    `truncateds` set, and one still open after the last table is returned unfinished.
    Every step is kept: the last row's `new_obs` becomes the episode's final observation.
    Columns outside RLlib's schema go into `extra_model_outputs`; `input_read_schema` maps
    our names onto foreign ones and a legacy `done` column becomes `terminateds`.
    """
    return list(_iter_tables(tables, input_read_schema, observation_space, name))


def _iter_tables(tables, input_read_schema, observation_space, name) -> Iterator[Episode]:
    if isinstance(tables, pa.Table):
        tables = [tables]
    asm = _Assembler(observation_space)
    for table in tables:
        yield from asm.add(_table_columns(table, input_read_schema, name), name)
    yield from asm.flush()
