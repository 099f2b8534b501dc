"""A multi-agent algorithm's offline data: multi-agent episodes read from the open
multi-agent Parquet format (`data.multi_agent_io`), each agent's episode handed to the module
`policy_mapping_fn` maps it to, and each module's learner columns made by that module's
learner pipeline and kept on the devices.

Each agent's episode is a single-agent `Episode` on the agent's own timeline (its own
observations, actions and rewards), so every single-agent learner piece (returns-to-go,
n-step targets, a mean-std filter fitted per module) runs on it unchanged.

A team (`trains_team_module`: MATD3+BC) gets joint rows instead (`materialize_team`): each
agent's episodes go through its module's learner pipeline (its state fitted on every episode
of the module's agents), and the rows are aligned by env step (`connectors.joint_rows`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import numpy as np

from rljax_offline.algorithms.multi_agent_modules import ModuleSetup
from rljax_offline.connectors.joint_rows import joint_rows
from rljax_offline.connectors.rows import episode_rows
from rljax_offline.data.device import DeviceData
from rljax_offline.data.multi_agent_io import iter_multi_agent_episodes
from rljax_offline.episode.episode import Episode
from rljax_offline.episode.multi_agent import MultiAgentEpisode
from rljax_offline.errors import ConfigError, OfflineDataError
from rljax_offline.learning.multi_data_parallel import MultiModuleParallel

__all__ = ["episodes_by_module", "materialize_modules", "materialize_team", "read_input"]


def read_input(input_: Any, filesystem: Any = None) -> list[MultiAgentEpisode]:
    """Every multi-agent episode under `input_` (a folder of the multi-agent format, or a
    list of them).

    Args:
      input_: a folder or URI, or a list of them.
      filesystem: a pyarrow filesystem (None: from the path).
    """
    paths = [input_] if isinstance(input_, (str, os.PathLike)) else list(input_)
    return [ep for p in paths
            for ep in iter_multi_agent_episodes(os.fspath(p), filesystem=filesystem)]


def episodes_by_module(episodes: Iterable[MultiAgentEpisode], mapping,
                       modules: Mapping[str, ModuleSetup]) -> dict[str, list[Episode]]:
    """`{module_id: [agent Episode, ...]}`: each agent's episode under the module `mapping`
    (the config's `policy_mapping_fn`) picks for it in its episode.

    Args:
      episodes: multi-agent episodes.
      mapping: `(agent_id, episode) -> module id` (`multi_agent_modules.agent_mapping`).
      modules: the built modules.

    Raises:
      OfflineDataError: an agent's observations do not fit its module's space, or a module
        has no data.
    """
    out: dict[str, list[Episode]] = {m: [] for m in modules}
    for ma in episodes:
        for agent_id, ep in ma.agent_episodes.items():
            module_id = mapping(agent_id, ma)
            _check_fits(ep, modules[module_id], module_id, ma)
            out[module_id].append(ep)
    empty = sorted(m for m, eps in out.items() if not eps)
    if empty:
        raise OfflineDataError(f"modules {empty} have no agent steps in the data: "
                               "policy_mapping_fn maps no recorded agent to them")
    return out


def _check_fits(ep: Episode, module: ModuleSetup, module_id: str, ma: MultiAgentEpisode):
    """A named error when an agent's observations are not of its module's space."""
    want = tuple(module.gym_spaces[0].shape or ())
    got = tuple(np.shape(ep.observations)[1:])
    if want and got != want:
        raise OfflineDataError(f"episode {ma.id_!r}, agent {ep.agent_id!r}: observations of "
                               f"shape {got}, but module {module_id!r} observes {want}")


def materialize_modules(by_module: Mapping[str, list[Episode]],
                        modules: Mapping[str, ModuleSetup], connector_states: Mapping,
                        runtime: MultiModuleParallel, *, fit: bool, sample_unit: str
                        ) -> tuple[dict[str, DeviceData], dict, dict]:
    """Each module's learner columns, on the devices.

    Args:
      by_module: `{module_id: agent episodes}`.
      modules: the built modules.
      connector_states: `{module_id: learner connector state}` (fitted on the module's
        episodes first when `fit`).
      runtime: the multi-module runtime that places the data.
      fit: fit the connector states (False for a restored run: its saved state is used).
      sample_unit: "timesteps" or "episodes".

    Returns:
      `(data, connector_states, counts)`: `{module_id: DeviceData}`, the connector states,
      and `{module_id: (timesteps, episodes)}`.
    """
    columns, lengths, states, counts = {}, {}, {}, {}
    for module_id, eps in by_module.items():
        m = modules[module_id]
        cols, states[module_id], lens = episode_rows(
            jax.jit(m.pipelines.learner.apply), eps, connector_states[module_id],
            m.pipelines.columns, fit=fit, what=f"module {module_id!r}'s learner")
        if sample_unit == "episodes" and lens is None:
            raise ConfigError("sample_unit='episodes' needs one block of rows per episode "
                              "from the learner pipeline")
        columns[module_id], lengths[module_id] = cols, lens
    data = runtime.put_data(columns, lengths)
    for module_id, d in data.items():
        counts[module_id] = (d.num_rows, d.num_episodes or len(by_module[module_id]))
    return data, states, counts


def materialize_team(episodes: list[MultiAgentEpisode], team_id: str, team: ModuleSetup,
                     members: Mapping[str, ModuleSetup], connector_states: Mapping,
                     runtime: MultiModuleParallel, *, fit: bool, env_state: bool,
                     normalize_state: bool) -> tuple[dict[str, DeviceData], dict, dict]:
    """The team's joint rows (one per env step), on the devices.

    Args:
      episodes: multi-agent episodes whose agents act at every env step.
      team_id: the team's id.
      team: the team (its `agents` in the rows' agent order).
      members: its modules; each agent's columns come from its module's learner pipeline.
      connector_states: `{module_id: its learner connector state}` (fitted on every episode
        of the module's agents first when `fit`).
      runtime: the multi-module runtime that places the data.
      fit: fit the connector states (False for a restored run).
      env_state: the critic reads the env's state from the episodes (False: the agents'
        observations concatenated).
      normalize_state: standardize the env's state by the data's mean and std.

    Returns:
      `(data, {team_id: {module_id: connector state}}, counts)`, as `materialize_modules`'.
    """
    states, column_fns = dict(connector_states), {}
    for module_id, m in members.items():
        apply = jax.jit(m.pipelines.learner.apply)
        what = f"module {module_id!r}'s learner"
        if fit:
            every_agent = [ma.agent_episodes[a] for ma in episodes for a in m.agents
                           if a in ma.agent_episodes]
            _, states[module_id], _ = episode_rows(apply, every_agent, states[module_id],
                                                   m.pipelines.columns, fit=True, what=what)

        def agent_columns(agent_episodes, m=m, apply=apply, what=what, module_id=module_id):
            cols, _, _ = episode_rows(apply, agent_episodes, states[module_id],
                                      m.pipelines.columns, what=what)
            return cols

        column_fns.update(dict.fromkeys(m.agents, agent_columns))
    columns, lengths = joint_rows(episodes, team.agents, agent_columns=column_fns,
                                  global_state=env_state)
    if env_state and normalize_state:
        mean = columns["global_state"].mean(axis=0)
        std = columns["global_state"].std(axis=0) + 1e-6
        for k in ("global_state", "new_global_state"):
            columns[k] = ((columns[k] - mean) / std).astype(np.float32)
    data = runtime.put_data({team_id: columns}, {team_id: lengths})
    return data, {team_id: states}, {team_id: (data[team_id].num_rows, len(lengths))}
