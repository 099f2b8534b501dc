"""The multi-agent Parquet format: row and record layouts, encoding and decoding.

A data set is a folder with two sub-folders whose files pair by name:

* `agents/<name>.parquet`: one row per agent episode (chunk). Column `item` holds the agent's
  single-agent episode exactly as the single-agent writer writes it (msgpack of RLlib's
  `SingleAgentEpisode.get_state()`), so RLlib's own single-agent reader, pointed at
  `agents/`, trains on it (parameter sharing over the agents). Beside it, plain columns:
  `multi_agent_episode_id`, `agent_id` (as text), `module_id`, `env_t_started`,
  `env_t_to_agent_t` (the env-step map, `-1` for RLlib's skip tag `"S"`), `map_lookback`,
  `agent_t_started` and `hanging` (msgpack of the agent's hanging action, model outputs and
  rewards; null when nothing hangs).
* `env/<name>.parquet`: one record per multi-agent episode (chunk) for what belongs to the
  env: `env_t_started`, `env_t`, `is_terminated`, `is_truncated`, `agent_ids`,
  `unjoined_rewards` (rewards of agents without an observation yet) and `global_state`
  (msgpack of the env's global state per env step, e.g. PettingZoo's `state()`, which
  centralised critics need; null when not recorded).

Everything is msgpack or Arrow (no pickle); the columns and a format version are in each
file's key-value metadata (`rljax_offline.multi_agent_schema`).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from rljax_offline.data.codec import decode_episode, decode_state, encode_episode, encode_state
from rljax_offline.data.files import META_PREFIX
from rljax_offline.data.writer import FORMAT_VERSION, file_metadata, with_rllib_action_dtype
from rljax_offline.episode.multi_agent import SKIP, MultiAgentEpisode
from rljax_offline.errors import OfflineDataError

AGENT_SCHEMA = pa.schema([
    pa.field("item", pa.binary()),
    pa.field("multi_agent_episode_id", pa.string()),
    pa.field("agent_id", pa.string()),
    pa.field("module_id", pa.string()),
    pa.field("env_t_started", pa.int64()),
    pa.field("env_t_to_agent_t", pa.list_(pa.int64())),
    pa.field("map_lookback", pa.int32()),
    pa.field("agent_t_started", pa.int64()),
    pa.field("hanging", pa.binary()),
])
ENV_SCHEMA = pa.schema([
    pa.field("multi_agent_episode_id", pa.string()),
    pa.field("env_t_started", pa.int64()),
    pa.field("env_t", pa.int64()),
    pa.field("is_terminated", pa.bool_()),
    pa.field("is_truncated", pa.bool_()),
    pa.field("agent_ids", pa.list_(pa.string())),
    pa.field("unjoined_rewards", pa.binary()),
    pa.field("global_state", pa.binary()),
])
_SKIP_CODE = -1


def schema_metadata(kind: str, episode: MultiAgentEpisode | None) -> dict[bytes, bytes]:
    """Key-value metadata of an `agents` or `env` file: version, layout, spaces, columns.

    Args:
      kind: `"agents"` or `"env"`.
      episode: an episode whose spaces are recorded (None: none).
    """
    first = None
    if episode is not None and episode.agent_episodes:
        first = next(iter(episode.agent_episodes.values()))
    meta = file_metadata(f"multi_agent_{kind}", first)
    schema = AGENT_SCHEMA if kind == "agents" else ENV_SCHEMA
    meta[(META_PREFIX + "multi_agent_schema").encode()] = json.dumps(
        {"format_version": FORMAT_VERSION, "kind": kind,
         "columns": {f.name: str(f.type) for f in schema}}).encode()
    return meta


def _map_codes(entries) -> list[int]:
    return [_SKIP_CODE if e == SKIP else int(e) for e in entries]


def _map_entries(codes) -> tuple:
    return tuple(SKIP if c == _SKIP_CODE else int(c) for c in codes)


def agent_rows(ep: MultiAgentEpisode) -> pa.Table:
    """The agent rows of one multi-agent episode (chunk), in `agent_episodes` order.

    Args:
      ep: the multi-agent episode.
    """
    cols: dict[str, list] = {f.name: [] for f in AGENT_SCHEMA}
    for a, sa in ep.agent_episodes.items():
        cols["item"].append(encode_episode(with_rllib_action_dtype(sa), finalized=True))
        cols["multi_agent_episode_id"].append(str(ep.id_))
        cols["agent_id"].append(str(a))
        cols["module_id"].append(None if sa.module_id is None else str(sa.module_id))
        cols["env_t_started"].append(ep.env_t_started)
        cols["env_t_to_agent_t"].append(_map_codes(ep.env_t_to_agent_t[a]))
        cols["map_lookback"].append(int(ep.map_lookback[a]))
        cols["agent_t_started"].append(int(ep.agent_t_started[a]))
        hanging = {}
        for key, d in (("action", ep.hanging_actions_end),
                       ("extra_model_outputs", ep.hanging_extra_model_outputs_end),
                       ("reward_end", ep.hanging_rewards_end),
                       ("reward_begin", ep.hanging_rewards_begin)):
            if a in d:
                hanging[key] = d[a]
        cols["hanging"].append(encode_state(hanging) if hanging else None)
    return pa.table(cols, schema=AGENT_SCHEMA)


def env_record(ep: MultiAgentEpisode, global_state: Any = None) -> pa.Table:
    """The env record of one multi-agent episode (chunk).

    Args:
      ep: the multi-agent episode.
      global_state: the env's states per env step, or None.
    """
    unjoined = {a: float(r) for a, r in ep.hanging_rewards_begin.items()
                if a not in ep.agent_episodes}
    state = None
    if global_state is not None:
        state = encode_state({"global_state": _as_numpy(global_state)})
    return pa.table({
        "multi_agent_episode_id": [str(ep.id_)], "env_t_started": [ep.env_t_started],
        "env_t": [ep.env_t], "is_terminated": [ep.is_terminated],
        "is_truncated": [ep.is_truncated], "agent_ids": [[str(a) for a in ep.agent_episodes]],
        "unjoined_rewards": [encode_state(unjoined) if unjoined else None],
        "global_state": [state]}, schema=ENV_SCHEMA)


def _as_numpy(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _as_numpy(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [_as_numpy(v) for v in tree]
    return np.asarray(tree)


def episode_from_rows(rows: list[dict], record: dict | None, *, file: str,
                      first_row: int) -> MultiAgentEpisode:
    """One multi-agent episode from its agent rows (dicts of the agent columns, in order)
    and its env record; errors name the file, row and agent.

    Args:
      rows: the episode's agent rows.
      record: its env record (None when the file has none).
      file: the file, named by errors.
      first_row: the row of `rows[0]` in that file, named by errors.
    """
    ma_id = rows[0]["multi_agent_episode_id"]
    if record is None:
        raise OfflineDataError(f"multi-agent episode {ma_id!r} (env_t_started "
                               f"{rows[0]['env_t_started']}) has agent rows but no env record "
                               "in the paired env/ file", file=file, row=first_row)
    episodes, maps, lookbacks, t_started = {}, {}, {}, {}
    h_act, h_emo, h_end, h_begin = {}, {}, {}, {}
    for k, row in enumerate(rows):
        where = dict(file=file, row=first_row + k)
        sa = decode_episode(row["item"], **where)
        aid = sa.agent_id
        if str(aid) != row["agent_id"]:
            raise OfflineDataError(f"agent {row['agent_id']!r}: the episode state holds agent "
                                   f"{aid!r}", column="agent_id", **where)
        if str(sa.multi_agent_episode_id) != ma_id:
            raise OfflineDataError(f"agent {aid!r}: the episode state belongs to multi-agent "
                                   f"episode {sa.multi_agent_episode_id!r}, the row to "
                                   f"{ma_id!r}", column="multi_agent_episode_id", **where)
        entries = _map_entries(row["env_t_to_agent_t"] or [])
        n_env = int(record["env_t"]) - int(record["env_t_started"])
        if len(entries) != int(row["map_lookback"]) + n_env + 1:
            raise OfflineDataError(f"agent {aid!r}: env-step map has {len(entries)} entries, "
                                   f"expected lookback {row['map_lookback']} + {n_env} env "
                                   "steps + 1", column="env_t_to_agent_t", **where)
        episodes[aid], maps[aid] = sa, entries
        lookbacks[aid], t_started[aid] = int(row["map_lookback"]), int(row["agent_t_started"])
        if row["hanging"] is not None:
            hanging = decode_state(row["hanging"], **where)
            for key, d in (("action", h_act), ("extra_model_outputs", h_emo),
                           ("reward_end", h_end), ("reward_begin", h_begin)):
                if key in hanging:
                    d[aid] = hanging[key]
    expected = list(record["agent_ids"] or [])
    got = [str(a) for a in episodes]
    if sorted(got) != sorted(expected):
        missing = sorted(set(expected) - set(got))
        extra = sorted(set(got) - set(expected))
        raise OfflineDataError(f"multi-agent episode {ma_id!r}: agent rows {got} do not match "
                               f"the env record's agents {expected} (missing {missing}, "
                               f"unexpected {extra})", file=file, row=first_row)
    custom = {}
    if record.get("unjoined_rewards") is not None:
        h_begin.update(decode_state(record["unjoined_rewards"], file=file, row=first_row))
    if record.get("global_state") is not None:
        custom["global_state"] = decode_state(record["global_state"], file=file,
                                              row=first_row)["global_state"]
    return MultiAgentEpisode(
        id_=ma_id, agent_episodes=episodes, env_t_to_agent_t=maps, map_lookback=lookbacks,
        agent_t_started=t_started, env_t_started=int(record["env_t_started"]),
        env_t=int(record["env_t"]), is_terminated=bool(record["is_terminated"]),
        is_truncated=bool(record["is_truncated"]), hanging_actions_end=h_act,
        hanging_extra_model_outputs_end=h_emo, hanging_rewards_end=h_end,
        hanging_rewards_begin=h_begin,
        agent_module_ids={a: e.module_id for a, e in episodes.items()},
        observation_space={a: e.observation_space for a, e in episodes.items()
                           if e.observation_space_spec is not None},
        action_space={a: e.action_space for a, e in episodes.items()
                      if e.action_space_spec is not None},
        custom_data=custom)
