"""RLlib's old-API-stack JSON lines (`JsonWriter` output): one `SampleBatch` or
`MultiAgentBatch` a line, read as finished episodes.

A `SampleBatch` line holds columns (`obs`, `actions`, `rewards`, `new_obs`, `dones` or
`terminateds`/`truncateds`, `eps_id`, ...), each a JSON list or RLlib's compressed string
(`base64(lz4(pickle))`, decoded by the safe unpickler of `data.tabular`). A `MultiAgentBatch`
line holds `policy_batches: {policy_id: {column: ...}}`; each policy's rows become episodes
with `module_id` set to the policy id. Rows are split into episodes where `eps_id` changes
(a batch of `rollout_fragment_length` steps can hold several) and, with an `agent_index`
column, per `(eps_id, agent_index)`: two agents that share a policy are two episodes (ids
`<eps_id>_<agent_index>`, `agent_id` and `multi_agent_episode_id` set). An episode is
terminated or truncated when one of its rows says so. Columns beyond RLlib's become extra
model outputs.

Every malformed line (not UTF-8, not JSON, nested too deep, a wrong type, columns of different
lengths, values outside the spaces) is an `OfflineDataError` naming the file, the line number
(1-based) and the column.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from rljax_offline.data.compressed_cells import unpack_compressed
from rljax_offline.data.validate import check_episode
from rljax_offline.episode.episode import Episode, EpisodeError
from rljax_offline.errors import OfflineDataError

_NOT_EMO = {"obs", "actions", "rewards", "new_obs", "dones", "terminateds", "truncateds",
            "eps_id", "infos", "type", "t", "unroll_id", "agent_index", "env_id", "count",
            "seq_lens", "state_in_0", "state_out_0"}
_MAX_LINE_BYTES = 1 << 28


def _column(batch: dict, col: str, where: dict) -> np.ndarray:
    value = batch[col]
    if isinstance(value, str):
        try:
            return np.asarray(unpack_compressed(value))
        except ValueError as e:
            raise OfflineDataError(f"compressed column cannot be decoded: {e}", column=col,
                                   **where) from None
    if not isinstance(value, list):
        raise OfflineDataError(f"column must be a list (or a compressed string), got "
                               f"{type(value).__name__}", column=col, **where)
    try:
        arr = np.asarray(value)
    except ValueError as e:  # ragged nesting
        raise OfflineDataError(f"column is ragged (rows of different shapes): {e}", column=col,
                               **where) from None
    if arr.dtype.kind not in "biuf":
        raise OfflineDataError(f"column must hold numbers, got values such as "
                               f"{str(value[:1])[:80]}", column=col, **where)
    return arr


def _episodes_of_batch(batch: Any, where: dict, module_id: str | None) -> Iterator[Episode]:
    if not isinstance(batch, dict):
        raise OfflineDataError(f"a batch must be a JSON object, got {type(batch).__name__}",
                               **where)
    for col in ("obs", "actions", "rewards"):
        if col not in batch:
            raise OfflineDataError("missing column", column=col, **where)
    cols = {k: _column(batch, k, where) for k in batch
            if k not in ("type", "count", "infos") and k not in ("state_in_0", "state_out_0")}
    n = len(cols["actions"])
    for k, v in cols.items():
        if v.ndim == 0 or len(v) != n:
            raise OfflineDataError(f"column has {0 if v.ndim == 0 else len(v)} rows, "
                                   f"'actions' has {n}", column=k, **where)
    if n == 0:
        return
    ids = cols.get("eps_id", np.zeros(n, np.int64))
    agents = cols.get("agent_index")
    done_term = cols.get("terminateds", cols.get("dones", np.zeros(n, bool))).astype(bool)
    done_trunc = cols.get("truncateds", np.zeros(n, bool)).astype(bool)
    for rows, agent in _episode_rows(ids, agents):
        a, b = int(rows[0]), int(rows[-1]) + 1
        span = f"rows {a}..{b - 1}" + ("" if agent is None else f" (agent_index {agent})")
        obs = cols["obs"][rows]
        new_obs = cols.get("new_obs", cols["obs"])[rows]
        multi = agent is not None and len(set(agents[ids == ids[a]].tolist())) > 1
        eps_id = str(ids[a].item()) if "eps_id" in cols else None
        try:
            episode = Episode(
                observations=np.concatenate([obs, new_obs[-1:]]),
                actions=cols["actions"][rows], rewards=cols["rewards"][rows].astype(np.float64),
                extra_model_outputs={k: v[rows] for k, v in cols.items() if k not in _NOT_EMO},
                terminated=bool(done_term[rows].any()),
                truncated=bool(done_trunc[rows].any()) and not bool(done_term[rows].any()),
                id_=f"{eps_id}_{agent}" if multi and eps_id is not None else eps_id,
                agent_id=agent if multi else None,
                multi_agent_episode_id=eps_id if multi else None,
                **({"module_id": module_id} if module_id is not None else {}))
        except (EpisodeError, ValueError, TypeError) as e:
            raise OfflineDataError(f"{span} are not an episode: {e}", **where) from None
        check_episode(episode, **where)
        yield episode


def _episode_rows(ids: np.ndarray, agents: np.ndarray | None) -> Iterator[tuple]:
    """Row indices of each episode, in order of first row: a new episode where `eps_id`
    changes; with `agent_index`, the rows of one `(eps_id, agent_index)` pair (two agents
    sharing a policy write interleaved or consecutive rows of one `eps_id`)."""
    n = len(ids)
    starts = [0, *(np.flatnonzero(ids[1:] != ids[:-1]) + 1).tolist(), n]
    for a, b in zip(starts[:-1], starts[1:]):
        if agents is None or len(np.unique(agents[a:b])) == 1:
            yield np.arange(a, b), (None if agents is None else agents[a].item())
            continue
        seen: dict = {}
        for r in range(a, b):
            seen.setdefault(agents[r].item(), []).append(r)
        for agent, rows in seen.items():
            yield np.asarray(rows), agent


def _parse(raw: bytes, path: str, lineno: int) -> Any:
    import json

    where = {"file": path, "line": lineno}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise OfflineDataError(f"not UTF-8 text: {e}", **where) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise OfflineDataError(f"not JSON: {e}", **where) from None
    except RecursionError:
        raise OfflineDataError("JSON nested too deeply", **where) from None


def read_sample_batch_json(path: str, *, on_bad_file: str = "raise",
                           skipped: list | None = None) -> Iterator[Episode]:
    """Episodes of every batch line of an RLlib JSON file, in file order.

    `on_bad_file="skip"` checks the whole file first and yields nothing from a file with a bad
    line (its `(file, reason)` goes to `skipped`), so a file is used whole or not at all.

    Args:
      path: the JSON-lines file (one `SampleBatch` dict a line, RLlib's old output format).
      on_bad_file: `"raise"` on a bad line, or `"skip"` the file.
      skipped: a list (e.g. a `SkipReport`) that collects `(file, reason)` of skipped files.

    Yields:
      Episodes: each batch line's rows split where `eps_id` changes (per agent in a
      multi-agent batch).

    Raises:
      OfflineDataError: a line that is no batch, or a bad column (with `on_bad_file="raise"`;
        the error names the file, line and column).
    """
    if on_bad_file not in ("raise", "skip"):
        raise ValueError(f"on_bad_file must be 'raise' or 'skip', got {on_bad_file!r}")
    if on_bad_file == "raise":
        yield from _read_lines(path)
        return
    try:
        episodes = list(_read_lines(path))
    except OfflineDataError as e:
        if skipped is not None:
            skipped.append((path, str(e)))
        return
    yield from episodes


def _read_lines(path: str) -> Iterator[Episode]:
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise OfflineDataError("file does not exist", file=path) from None
    except OSError as e:
        raise OfflineDataError(f"cannot be opened: {e}", file=path) from None
    with fh:
        for lineno, raw in enumerate(fh, start=1):
            if len(raw) > _MAX_LINE_BYTES:
                raise OfflineDataError(f"line longer than {_MAX_LINE_BYTES} bytes", file=path,
                                       line=lineno)
            if not raw.strip():
                continue
            where = {"file": path, "line": lineno}
            batch = _parse(raw, path, lineno)
            kind = batch.get("type", "SampleBatch") if isinstance(batch, dict) else None
            if kind == "MultiAgentBatch":
                policies = batch.get("policy_batches")
                if not isinstance(policies, dict):
                    raise OfflineDataError("MultiAgentBatch needs an object 'policy_batches'",
                                           column="policy_batches", **where)
                for policy_id, sub in policies.items():
                    yield from _episodes_of_batch(sub, where, str(policy_id))
            elif kind == "SampleBatch":
                yield from _episodes_of_batch(batch, where, None)
            else:
                raise OfflineDataError(f"unsupported batch type {str(kind)[:40]!r} (expected "
                                       "SampleBatch or MultiAgentBatch)", **where)
