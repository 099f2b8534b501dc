"""Conversions between the forms of offline data: episodes <-> RLlib's tabular rows
(`pyarrow.Table`, one timestep a row), RLlib's old `SampleBatch` JSON lines -> episodes, and
whole data sets between episode rows, tabular rows and Minari (what `rljax-offline convert`
runs).

`episodes_to_tabular` and `tabular_to_episodes` are the table-level halves of what the reader
and writer stream file by file, for data already in memory; `convert_dataset` and
`convert_minari` stream whole data sets from files to files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from rljax_offline.data.minari import _data_path, iter_minari_episodes, write_minari
from rljax_offline.data.reader import SkipReport, iter_episodes
from rljax_offline.data.sample_batch_json import read_sample_batch_json
from rljax_offline.data.tabular import _Assembler, _table_columns, episodes_to_table
from rljax_offline.data.writer import EpisodeWriter
from rljax_offline.episode.episode import Episode
from rljax_offline.errors import OutputExistsError

__all__ = ["convert_dataset", "convert_minari", "episodes_to_tabular", "read_sample_batch_json",
           "tabular_to_episodes"]


def episodes_to_tabular(episodes: Iterable[Episode], *,
                        output_compress_columns: list[str] | None = None) -> pa.Table:
    """Episodes as RLlib's tabular rows (`eps_id`, `obs`, `actions`, `rewards`, `new_obs`,
    `terminateds`, `truncateds`, then extra model outputs), lookback excluded.

    Fixed-size observations become Arrow fixed-size lists (the per-row shape in the field
    metadata, as Ray's tensor columns carry it); columns named in `output_compress_columns`
    are stored as RLlib's `base64(lz4(pickle))` strings.

    Args:
      episodes: the episodes to flatten.
      output_compress_columns: columns to store compressed (RLlib's option of that name).

    Returns:
      One Arrow table, one timestep a row.
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

    Args:
      tables: one Arrow table or an iterable of them, in file order.
      input_read_schema: our column name -> the table's (RLlib's option of that name).
      observation_space: the observation space the episodes get (and are checked against).
      name: what errors call the input (a file name).

    Returns:
      The episodes, in the order their first row appeared.

    Raises:
      OfflineDataError: a missing column or a row that does not fit its episode (the error
        names the input and column).
    """
    return list(_iter_tables(tables, input_read_schema, observation_space, name))


def _iter_tables(tables, input_read_schema, observation_space, name) -> Iterator[Episode]:
    if isinstance(tables, pa.Table):
        tables = [tables]
    asm = _Assembler(observation_space)
    for table in tables:
        yield from asm.add(_table_columns(table, input_read_schema, name), name)
    yield from asm.flush()


def convert_dataset(input_: Any, output: str, *, to: str, input_read_schema: dict | None = None,
                    input_read_episodes: bool | None = None,
                    output_max_rows_per_file: int | None = None, on_bad_file: str = "raise",
                    skipped: SkipReport | None = None, **write_options) -> list[str]:
    """Converts tabular rows <-> episode rows (and SampleBatch JSON lines -> episodes).

    The input format is the opposite of `to` unless `input_read_episodes` says otherwise;
    `.json`/`.jsonl` inputs are read as RLlib's old SampleBatch JSON.

    Args:
      input_: files, folders, globs or URIs to read (`iter_episodes`' `input_`).
      output: the folder to write under.
      to: `"episodes"` (episode rows) or `"tabular"` (one timestep a row).
      input_read_schema: our column name -> the input's, for tabular input.
      input_read_episodes: the input holds episode rows (default: the opposite of `to`).
      output_max_rows_per_file: rows per output file (None: one file).
      on_bad_file: `"raise"` or `"skip"` an unreadable input file.
      skipped: a `SkipReport` that collects what was skipped.
      **write_options: more `EpisodeWriter` options.

    Returns:
      The files written.
    """
    if to not in ("episodes", "tabular"):
        raise ValueError(f"to must be 'episodes' or 'tabular', got {to!r}")
    paths = [input_] if isinstance(input_, (str, os.PathLike)) else list(input_)
    _refuse_overlap(paths, os.fspath(output))
    paths = [os.fspath(p) for p in paths]
    if all(str(p).endswith((".json", ".jsonl")) for p in paths):
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

    Args:
      input_: a Parquet input (`to="minari"`) or `"minari:DATASET_ID"`.
      output: the Minari dataset id (`to="minari"`) or the output folder.
      to: `"minari"`, `"episodes"` or `"tabular"`.
      env: the env (id or instance) a new Minari dataset records, for its spaces and specs.
      output_max_rows_per_file: rows per Parquet output file (None: one file).
      **read_options: more `iter_episodes` options for a Parquet input.
    """
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
