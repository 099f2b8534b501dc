"""RLlib's tabular format: one timestep a row, grouped into episodes by `eps_id`.

Columns (RLlib's defaults): `eps_id`, `agent_id`, `module_id`, `obs`, `actions`, `rewards`,
`new_obs`, `terminateds`, `truncateds`, then extra model outputs (`action_dist_inputs`,
`action_logp`, `weights_seq_no`, ...). Row t holds o_t, a_t, r_t, o_{t+1}; the flags are set on an
episode's last row only.

Tensor columns are read from Ray's `arrow_tensor_v2` (a `large_list` with the per-row shape in
the field metadata), plain or fixed-size lists; LZ4-compressed columns (RLlib's default for
`obs`/`new_obs`) are decoded safely by `data.compressed_cells`.

In skip mode, an episode with rows in a skipped file is dropped whole, never returned cut:
the episodes still open when a bad file is met and every `eps_id` readable from that file are
dropped (and counted in the `SkipReport`). When not even the `eps_id` column of the bad file
can be read, the episodes of the next file up to its first finished row are dropped as well
(with RLlib's contiguous rows that is exactly the episode that may have begun in the bad
file; a finished episode may be dropped with it, never a cut one returned).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from rljax_offline import spaces as sp
from rljax_offline.data.compressed_cells import pack_compressed, unpack_compressed
from rljax_offline.data.files import META_PREFIX, as_data_error, display_name, open_parquet
from rljax_offline.data.validate import check_episode
from rljax_offline.episode.episode import Episode, EpisodeError
from rljax_offline.errors import OfflineDataError, UnsafePayloadError

KNOWN = ("eps_id", "agent_id", "module_id", "obs", "actions", "rewards", "new_obs",
         "terminateds", "truncateds", "infos")
TENSOR_EXT = b"ARROW:extension:metadata"

# ---------------------------------------------------------------------- reading


def _tensor_shape(raw: bytes, name: str, col: str) -> tuple[int, ...]:
    """Ray's per-row tensor shape from field metadata: a JSON list of ints >= 0."""
    try:
        shape = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise OfflineDataError(f"tensor shape metadata is not JSON: {e}", file=name,
                               column=col) from None
    if (not isinstance(shape, list) or len(shape) > 32
            or not all(type(d) is int and 0 <= d < 1 << 31 for d in shape)):
        raise OfflineDataError(f"tensor shape metadata must be a list of ints >= 0, got "
                               f"{str(shape)[:80]}", file=name, column=col)
    return tuple(shape)


def _column_values(table: pa.Table, col: str, name: str) -> np.ndarray:
    """A column as a numpy array `[rows, ...]`, whatever way it was stored."""
    arr = table.column(col).combine_chunks()
    field = table.schema.field(col)
    typ = arr.type
    if isinstance(typ, pa.ExtensionType):
        arr, typ = arr.storage, arr.storage.type
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        values = arr.to_pylist()
        out = []
        for row, v in enumerate(values):
            try:
                out.append(unpack_compressed(v))
            except ValueError as e:
                error = UnsafePayloadError if "refused" in str(e) else OfflineDataError
                raise error(f"compressed cell cannot be decoded: {e}", file=name, row=row,
                            column=col) from None
        return np.stack(out) if out else np.zeros((0,))
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        shape = None
        meta = field.metadata or {}
        if TENSOR_EXT in meta:
            shape = _tensor_shape(meta[TENSOR_EXT], name, col)
        if pa.types.is_fixed_size_list(typ) and shape is None:
            shape = (typ.list_size,)
        if arr.null_count:
            row = int(np.argwhere(np.asarray(arr.is_null()))[0, 0])
            raise OfflineDataError("tensor column has a null row", file=name, row=row,
                                   column=col)
        flat = arr.flatten().to_numpy(zero_copy_only=False)
        if flat.dtype.kind not in "biuf":
            raise OfflineDataError(f"tensor column must hold numbers, got {arr.type}",
                                   file=name, column=col)
        n = len(arr)
        if shape is None:
            lengths = np.diff(arr.offsets.to_numpy())
            if n and np.any(lengths != lengths[0]):
                raise OfflineDataError("list column is ragged (rows of different lengths)",
                                       file=name, column=col)
            shape = (int(lengths[0]) if n else 0,)
        try:
            return flat.reshape((n, *shape))
        except ValueError:
            raise OfflineDataError(f"tensor column does not hold {n} rows of shape {shape}",
                                   file=name, column=col) from None
    if pa.types.is_null(typ):
        return np.full(len(arr), None, object)
    if arr.null_count:
        row = int(np.argwhere(np.asarray(arr.is_null()))[0, 0])
        raise OfflineDataError("null value", file=name, row=row, column=col)
    return arr.to_numpy(zero_copy_only=False)


def _map_columns(table: pa.Table, schema: dict | None, name: str) -> dict[str, str]:
    """Our column name -> the file's column name."""
    names = table.schema.names
    mapping = {k: k for k in names}
    for ours, theirs in (schema or {}).items():
        if theirs not in names:
            raise OfflineDataError(f"input_read_schema maps {ours!r} to {theirs!r}, which the "
                                   f"file does not have (it has {names})", file=name,
                                   column=theirs)
        mapping.pop(theirs, None)
        mapping[ours] = theirs
    return mapping


def _table_columns(table: pa.Table, schema: dict | None, name: str) -> dict[str, Any]:
    mapping = _map_columns(table, schema, name)
    if "done" in mapping and "terminateds" not in mapping:
        mapping["terminateds"] = mapping.pop("done")
    for required in ("eps_id", "obs", "actions", "rewards"):
        if required not in mapping:
            raise OfflineDataError(f"missing column {required!r} (has {table.schema.names}); "
                                   "map foreign names with input_read_schema", file=name,
                                   column=required)
    cols = {}
    for ours, theirs in mapping.items():
        if ours in ("agent_id", "module_id", "infos"):
            continue
        if ours == "eps_id":
            ids = table.column(theirs).to_pylist()
            if None in ids:
                raise OfflineDataError("eps_id is null", file=name, row=ids.index(None),
                                       column=theirs)
            cols[ours] = np.asarray(ids, object)
            continue
        cols[ours] = _column_values(table, theirs, name)
    for flag in ("terminateds", "truncateds"):
        if flag in cols and cols[flag].dtype != bool:
            raise OfflineDataError(f"column must be bool, got {cols[flag].dtype}", file=name,
                                   column=mapping[flag])
    return cols


class _Assembler:
    """Collects rows per `eps_id` and emits an episode when its last row (a flag) arrives."""

    def __init__(self, observation_space: Any = None, action_space: Any = None):
        self.open: dict[str, dict[str, list]] = {}
        self.space = observation_space
        self.action_space = action_space
        self.dropped: set[str] = set()  # episodes with rows in a skipped file
        self.newly_dropped: list[str] = []
        # After a skipped file whose eps_ids could not be read: the episodes open at the start
        # of the next file may have begun in it, so they are dropped too.
        self.suspect_start = False

    def drop_open(self) -> list[str]:
        """Drops every unfinished episode (its rows may continue in a skipped file)."""
        ids = list(self.open)
        self.dropped.update(ids)
        self.newly_dropped += ids
        self.open.clear()
        return ids

    def _drop_suspect_start(self, eps_ids: np.ndarray, done: np.ndarray) -> None:
        """Drops the episodes seen in this file up to its first finished row."""
        last = int(np.argmax(done)) if done.any() else len(done) - 1
        for eid in dict.fromkeys(str(e) for e in eps_ids[:last + 1]):
            if eid not in self.dropped:
                self.dropped.add(eid)
                self.newly_dropped.append(eid)
        self.suspect_start = False

    def add(self, cols: dict[str, Any], name: str) -> Iterator[Episode]:
        n = len(cols["eps_id"])
        eps_ids = cols["eps_id"]
        done = np.zeros(n, bool)
        for f in ("terminateds", "truncateds"):
            if f in cols:
                done |= cols[f]
        if self.suspect_start and n:
            self._drop_suspect_start(eps_ids, done)
        for row in range(n):
            eid = str(eps_ids[row])
            if eid in self.dropped:
                continue
            acc = self.open.setdefault(eid, {"rows": [], "file": name})
            acc["rows"].append((cols, row))
            if done[row]:
                yield self._build(eid, self.open.pop(eid), row)

    def flush(self) -> Iterator[Episode]:
        for eid in list(self.open):
            acc = self.open.pop(eid)
            yield self._build(eid, acc, acc["rows"][-1][1])

    def _build(self, eid: str, acc: dict, last: int) -> Episode:
        rows, name = acc["rows"], acc["file"]
        obs = [c["obs"][r] for c, r in rows]
        last_cols, last_row = rows[-1]
        if "new_obs" in last_cols:
            for i in range(1, len(rows)):
                c, r = rows[i - 1]
                if not np.array_equal(c["new_obs"][r], obs[i], equal_nan=True):
                    raise OfflineDataError(
                        f"episode {eid!r} has a gap: new_obs of its step {i - 1} is not the obs "
                        f"of its step {i} (rows missing or out of order)", file=name,
                        row=r, column="new_obs")
            obs.append(last_cols["new_obs"][last_row])
        else:
            obs.append(obs[-1])
        emo_keys = [k for k in last_cols if k not in KNOWN]
        rewards = np.asarray([c["rewards"][r] for c, r in rows])
        if rewards.dtype.kind not in "biuf":
            raise OfflineDataError(f"rewards of episode {eid!r} must be numbers, got "
                                   f"{rewards.dtype} values such as {rewards[0]!r}", file=name,
                                   row=last, column="rewards")
        try:
            episode = Episode(
                observations=obs, actions=[c["actions"][r] for c, r in rows],
                rewards=rewards.astype(np.float64),
                extra_model_outputs={k: [c[k][r] for c, r in rows] for k in emo_keys},
                terminated=bool(last_cols["terminateds"][last_row])
                if "terminateds" in last_cols else False,
                truncated=bool(last_cols["truncateds"][last_row])
                if "truncateds" in last_cols else False,
                id_=eid, observation_space=self.space, action_space=self.action_space)
        except (EpisodeError, ValueError, TypeError) as e:
            raise OfflineDataError(f"rows of episode {eid!r} do not form an episode: {e}",
                                   file=name, row=last, column="obs") from None
        check_episode(episode, file=name, row=last)
        return episode


def _stored_spaces(pf: Any, name: str) -> dict:
    """The spaces our writer stored in the file's key-value metadata (none for RLlib's)."""
    meta = pf.schema_arrow.metadata or {}
    out = {}
    for key in ("observation_space", "action_space"):
        raw = meta.get((META_PREFIX + key).encode())
        if raw is None:
            continue
        try:
            out[key] = sp.space_from_dict(json.loads(raw))
        except (ValueError, RecursionError) as e:
            raise OfflineDataError(f"stored {key} metadata is malformed: {e}",
                                   file=name) from None
    return out


def _readable_ids(fs: Any, path: str, column: str) -> set[str]:
    """The `eps_id`s that can still be read from a damaged file (none when that fails too)."""
    import pyarrow.parquet as pq

    try:
        return {str(v) for v in pq.read_table(fs.open_input_file(path), columns=[column])
                .column(0).to_pylist() if v is not None}
    except Exception:  # noqa: BLE001 - the file is already known to be damaged
        return set()


def iter_tabular_episodes(files, *, input_read_schema: dict | None = None,
                          on_bad_file: str = "raise", skipped: list | None = None,
                          observation_space: Any = None, action_space: Any = None
                          ) -> Iterator[Episode]:
    """Episodes from tabular files, rows grouped by `eps_id` in time order across files.

    Args:
      files: `(filesystem, path)` pairs, in order.
      input_read_schema: our column name -> the files'.
      on_bad_file: `"raise"` or `"skip"` an unreadable file.
      skipped: collects `(file, reason)` of skipped files (and dropped episodes).
      observation_space: the space observations are checked against.
      action_space: the space actions are checked against.
    """

    asm = _Assembler(observation_space, action_space)
    for fs, path in files:
        name = display_name(fs, path)
        try:
            try:
                pf = open_parquet(fs, path)
                stored = _stored_spaces(pf, name)
                asm.space = observation_space or stored.get("observation_space")
                asm.action_space = action_space or stored.get("action_space")
                for i in range(pf.num_row_groups):
                    table = pf.read_row_group(i)
                    yield from asm.add(_table_columns(table, input_read_schema, name), name)
            except Exception as e:  # noqa: BLE001 - every failure becomes a named error
                raise as_data_error(e, name) from None
        except OfflineDataError as e:
            if on_bad_file == "raise":
                raise
            asm.drop_open()
            cut = _readable_ids(fs, path, (input_read_schema or {}).get("eps_id", "eps_id"))
            asm.newly_dropped += sorted(cut - asm.dropped)
            asm.dropped.update(cut)
            asm.suspect_start = not cut
            if skipped is not None:
                skipped.append((name, getattr(e, "reason", str(e))))
        finally:
            if skipped is not None and asm.newly_dropped:
                getattr(skipped, "dropped_episodes", []).extend(
                    (eid, name) for eid in asm.newly_dropped)
            asm.newly_dropped = []
    yield from asm.flush()


# ---------------------------------------------------------------------- writing


def _tensor_array(values: np.ndarray, compress: bool) -> tuple[pa.Array, dict | None]:
    if compress:
        return pa.array([pack_compressed(v) for v in values], pa.string()), None
    values = np.ascontiguousarray(values)
    if values.ndim == 1:
        return pa.array(values), None
    per_row = values.shape[1:]
    flat = pa.array(values.reshape(len(values), -1).reshape(-1))
    arr = pa.FixedSizeListArray.from_arrays(flat, int(np.prod(per_row)))
    return arr, {TENSOR_EXT: json.dumps(list(per_row)).encode()}


def episodes_to_table(episodes: list[Episode], compress_columns: list[str] | None = None
                      ) -> pa.Table:
    """Episodes as RLlib's tabular rows (lookback excluded), tensors as fixed-size lists.

    Args:
      episodes: the episodes to flatten.
      compress_columns: columns stored as RLlib's compressed strings (`pack_compressed`).

    Returns:
      One Arrow table, one timestep a row.
    """
    compress = set(compress_columns or [])
    parts: dict[str, list] = {}
    for ep in episodes:
        T = len(ep)
        obs = np.asarray(ep.get_observations())
        if not isinstance(ep.observations, np.ndarray):
            raise OfflineDataError("the tabular format holds flat observations only; write "
                                   "Dict/Tuple observations as episode rows")
        flags = np.zeros(T, bool)
        cols = {
            "eps_id": np.array([ep.id_] * T, object),
            "agent_id": np.array([ep.agent_id] * T, object),
            "module_id": np.array([ep.module_id] * T, object),
            "obs": obs[:-1], "actions": np.asarray(ep.get_actions()),
            "rewards": np.asarray(ep.get_rewards(), np.float64), "new_obs": obs[1:],
            "terminateds": np.where(np.arange(T) == T - 1, ep.is_terminated, flags),
            "truncateds": np.where(np.arange(T) == T - 1, ep.is_truncated, flags),
        }
        for k in ep.extra_model_outputs:
            cols[k] = np.asarray(ep.get_extra_model_outputs(k))
        for k, v in cols.items():
            parts.setdefault(k, []).append(v)
    arrays, fields = [], []
    for k, chunks in parts.items():
        values = np.concatenate(chunks) if chunks else np.zeros(0)
        if k == "eps_id":
            arr, meta = pa.array(values.tolist(), pa.string()), None
        elif k in ("agent_id", "module_id"):
            arr = pa.array(values.tolist())  # all None: Arrow type null, as RLlib writes
            meta = None
        else:
            arr, meta = _tensor_array(values, k in compress)
        arrays.append(arr)
        fields.append(pa.field(k, arr.type, metadata=meta))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))
