"""Joint rows: multi-agent episodes as one learner row per env step ("synchronized"
sampling, RLlib's name in its multi-agent replay), what a centralised critic trains on.

A row holds every agent's step at one env step, the agents in a fixed order `agent_ids`:

* `obs`, `new_obs` `[N, A, ...]`, `actions` `[N, A, ...]`, `rewards` `[N, A]`,
  `terminateds` `[N, A]`: each agent's own columns at that env step;
* `team_rewards` `[N]`: the sum of the agents' rewards (RLlib's team return is this sum);
* `global_state`, `new_global_state` `[N, ...]`: the env's `state()` before and after the
  step, as `MultiAgentEnvRunner` keeps it in the episode's `custom_data["global_state"]`
  (one per entry of the env-step map; the multi-agent Parquet format stores it in the env
  record). With `global_state=False` (an env without `state()`) they are the agents'
  observations concatenated in `agent_ids` order instead.

Rows come in episode order (episodes of equal length keep their order), each episode's
steps in time order; the per-agent columns come from `agent_columns`, a function of the
agents' episodes (one per multi-agent episode, in that order) to their rows: by default
the raw steps (`raw_agent_columns`); a learner pipeline's rows work the same way (a
normalizer, clipped actions), as long as they are one row per agent step.

Agents of different spaces (a speaker and a listener) share the rows' agent axis: each
agent's flat observation and action rows are zero-padded on the last axis to the widest
agent's (`pad_agent_columns`), and `agent_widths` says each agent's own width, which a learner
slices back out with static indices (`agent_block`), so the padding never reaches a network.
Padding keeps ONE layout for every team (`[N, A, d]`, the homogeneous case its no-padding
special case, the device data and its sampling unchanged) where per-agent blocks of different
widths would make every column a dict and every learner handle both; the cost is the padded
zeros in memory (the widest agent's width times the agents). The concatenated observations
(`global_state=False`) are each agent's own, unpadded.

Only data where every agent acts at every env step has joint rows: an agent that skips an
env step, joins late or leaves early is an `AsynchronousAgentsError` naming the episode, the
agent and the env steps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rljax_offline.episode.episode import Episode
from rljax_offline.episode.multi_agent import SKIP, MultiAgentEpisode
from rljax_offline.errors import (
    AsynchronousAgentsError,
    MissingGlobalStateError,
    OfflineDataError,
)

__all__ = ["AGENT_COLUMNS", "JOINT_COLUMNS", "agent_block", "check_synchronized",
           "episode_global_states", "joint_rows", "pad_agent_columns", "raw_agent_columns"]

AGENT_COLUMNS = ("obs", "actions", "rewards", "new_obs", "terminateds")
JOINT_COLUMNS = (*AGENT_COLUMNS, "team_rewards", "global_state", "new_global_state")
PADDED_COLUMNS = ("obs", "new_obs", "actions")  # per-agent feature rows, padded to one width


def pad_agent_columns(per_agent: Sequence[np.ndarray], column: str) -> np.ndarray:
    """The agents' rows of one column side by side, `[N, A, ...]`; rows of different widths
    (flat features, `[N, d_i]`) zero-padded at the end to the widest.

    Args:
      per_agent: each agent's rows, in the rows' agent order.
      column: the column's name, for messages.

    Raises:
      OfflineDataError: the agents' rows differ in shape and are not flat.
    """
    arrays = [np.asarray(x) for x in per_agent]
    if len({x.shape[1:] for x in arrays}) == 1:
        return np.stack(arrays, axis=1)
    if column not in PADDED_COLUMNS or any(x.ndim != 2 for x in arrays):
        raise OfflineDataError(
            f"column {column!r}: the agents' rows have shapes "
            f"{[x.shape[1:] for x in arrays]}; agents of different spaces need flat "
            "observations and actions (one feature axis) to share joint rows")
    width = max(x.shape[1] for x in arrays)
    return np.stack([np.pad(x, ((0, 0), (0, width - x.shape[1]))) for x in arrays], axis=1)


def agent_block(rows, agent: int, width: int):
    """Agent `agent`'s own `width` features of padded joint rows `[N, A, ...]`, flat:
    `[N, width]` (a static slice; works on numpy and jax arrays alike).

    Args:
      rows: a padded column of joint rows.
      agent: the agent's index on the rows' agent axis.
      width: the agent's own (flat) width.
    """
    return rows[:, agent].reshape(rows.shape[0], -1)[:, :width]


def check_synchronized(episode: MultiAgentEpisode, agent_ids: Sequence) -> None:
    """Raises `AsynchronousAgentsError` unless each of `agent_ids` (and no other agent) has
    one step at every env step of `episode`.

    Args:
      episode: a multi-agent episode (chunk).
      agent_ids: the agents every joint row holds.
    """
    others = sorted(map(str, set(episode.agent_ids) - set(agent_ids)))
    missing = sorted(map(str, set(agent_ids) - set(episode.agent_ids)))
    if others or missing:
        raise AsynchronousAgentsError(
            f"episode {episode.id_!r}: agents {sorted(map(str, episode.agent_ids))}, but "
            f"joint rows hold {sorted(map(str, agent_ids))} at every env step (missing "
            f"{missing}, unexpected {others})")
    steps = len(episode)
    for agent_id in agent_ids:
        entries = episode.env_t_to_agent_t[agent_id][episode.map_lookback[agent_id]:]
        skipped = [episode.env_t_started + i for i, e in enumerate(entries) if e == SKIP]
        n = len(episode.agent_episodes[agent_id])
        if skipped or n != steps:
            where = (f"it skips env steps {skipped[:5]}{'...' if len(skipped) > 5 else ''}"
                     if skipped else f"it has {n} steps in {steps} env steps")
            raise AsynchronousAgentsError(
                f"episode {episode.id_!r}, agent {agent_id!r}: {where}; joint rows (a "
                "centralised critic's) need every agent to act at every env step")


def episode_global_states(episode: MultiAgentEpisode) -> np.ndarray:
    """The env's state at env steps `env_t_started .. env_t` (`[len + 1, ...]`), from
    `custom_data["global_state"]` (its lookback entries dropped).

    Args:
      episode: a multi-agent episode recorded with the env's global state.

    Raises:
      MissingGlobalStateError: the episode holds none, or not one per env step.
    """
    states = episode.custom_data.get("global_state")
    if states is None:
        raise MissingGlobalStateError(
            f"episode {episode.id_!r} holds no global state (custom_data['global_state']): "
            "record it with MultiAgentEnvRunner(global_state=True) from an env with state(), "
            "or use the agents' concatenated observations (global_state=False)")
    states = np.asarray(states)
    first = next(iter(episode.env_t_to_agent_t))
    lookback = int(episode.map_lookback[first])
    if states.shape[0] != len(episode.env_t_to_agent_t[first]):
        raise MissingGlobalStateError(
            f"episode {episode.id_!r}: {states.shape[0]} global states for "
            f"{len(episode.env_t_to_agent_t[first])} env-step map entries (lookback "
            f"{lookback} + {len(episode)} env steps + 1)")
    return states[lookback:]


def raw_agent_columns(episodes: Sequence[Episode]) -> dict[str, np.ndarray]:
    """The agents' own steps as rows, episodes one after the other: `obs`, `actions`,
    `rewards`, `new_obs` and `terminateds` (True at a terminated episode's last step).

    Args:
      episodes: single-agent episodes (flat Box or Discrete observations).
    """
    cols: dict[str, list] = {k: [] for k in AGENT_COLUMNS}
    for ep in episodes:
        n = len(ep)
        obs = np.asarray(ep.get_observations(slice(0, n + 1)))
        cols["obs"].append(obs[:-1])
        cols["new_obs"].append(obs[1:])
        cols["actions"].append(np.asarray(ep.get_actions(slice(0, n))))
        cols["rewards"].append(np.asarray(ep.get_rewards(slice(0, n)), np.float32))
        done = np.zeros(n, bool)
        done[-1:] = ep.is_terminated
        cols["terminateds"].append(done)
    return {k: np.concatenate(v) for k, v in cols.items()}


def joint_rows(episodes: Sequence[MultiAgentEpisode], agent_ids: Sequence, *,
               agent_columns: Callable[[list[Episode]], dict] | Mapping[Any, Callable]
               = raw_agent_columns,
               global_state: bool = True) -> tuple[dict[str, np.ndarray], list[int]]:
    """One row per env step of `episodes` (see the module docstring).

    Args:
      episodes: multi-agent episodes whose agents act at every env step.
      agent_ids: the agents, in the order of the rows' agent axis.
      agent_columns: `[agent episode, ...] -> {column: [rows, ...]}`, one row per agent
        step, episodes in the given order; it must make `AGENT_COLUMNS`. A mapping
        `{agent_id: function}` gives each agent its own (agents of different modules).
      global_state: the env's state from the episodes (True) or the concatenated
        observations (False).

    Returns:
      `(columns, lengths)`: `JOINT_COLUMNS` and each episode's row count in row order.

    Raises:
      AsynchronousAgentsError: an agent does not act at every env step of an episode.
      MissingGlobalStateError: `global_state` and an episode has no state per env step.
    """
    agent_ids = list(agent_ids)
    episodes = sorted((ep for ep in episodes if len(ep) > 0), key=len)
    for ep in episodes:
        check_synchronized(ep, agent_ids)
    lengths = [len(ep) for ep in episodes]
    column_fns = (agent_columns if isinstance(agent_columns, Mapping)
                  else dict.fromkeys(agent_ids, agent_columns))
    per_agent = {a: column_fns[a]([ep.agent_episodes[a] for ep in episodes])
                 for a in agent_ids}
    total = sum(lengths)
    for a, cols in per_agent.items():
        bad = {k: np.shape(cols[k])[0] for k in AGENT_COLUMNS if np.shape(cols[k])[0] != total}
        if bad:
            raise AsynchronousAgentsError(f"agent {a!r}: its columns have rows {bad}, the "
                                          f"episodes {total} env steps (one row per step)")
    out: dict[str, Any] = {k: pad_agent_columns([per_agent[a][k] for a in agent_ids], k)
                           for k in AGENT_COLUMNS}
    out["terminateds"] = out["terminateds"].astype(bool)
    out["team_rewards"] = out["rewards"].sum(axis=1).astype(np.float32)
    if global_state:
        states = [episode_global_states(ep) for ep in episodes]
        out["global_state"] = np.concatenate([s[:-1] for s in states]).astype(np.float32)
        out["new_global_state"] = np.concatenate([s[1:] for s in states]).astype(np.float32)
    else:
        for key, k in (("global_state", "obs"), ("new_global_state", "new_obs")):
            out[key] = np.concatenate([np.asarray(per_agent[a][k]).reshape(total, -1)
                                       for a in agent_ids], axis=1).astype(np.float32)
    return out, lengths
