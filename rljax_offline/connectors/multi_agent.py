"""Multi-agent connectors: RLlib's agent-to-module mapping and back, plus the pieces that
multi-agent learning needs on top of the single-agent ones.

RLlib keys every multi-agent batch item by `(eps_id, agent_id, module_id)`:
`agent_items(episodes)` builds that batch from `MultiAgentEpisode`s the way RLlib's
`AddObservationsFromEpisodesToBatch` (+ `AddColumnsFromEpisodesToTrainBatch` for the learner)
does, `agent_to_module_mapping` turns it into `{module_id: {column: array}}` (RLlib's
`AgentToModuleMapping` followed by its batching of the items) and remembers which rows are
whose, and `module_to_agent_unmapping` goes back (RLlib's `UnBatchToIndividualItems` +
`ModuleToAgentUnmapping`). The mapped batch carries an `agent_index` column (the agent's
position in `agent_ids`), so the pieces that follow are pure array functions that `jax.jit`
compiles: `agent_one_hot` (the one-hot agent index that parameter sharing over identical
agents needs) and `global_state_column` (the env's state, for centralised critics).

Single-agent pieces run per agent on the agent's own timeline: `module_batches` pads each
module's agent episodes into one `EpisodeBatch`, and `apply_per_module` runs a single-agent
pipeline on it, e.g. `frame_stack(4)` as RLlib's `FrameStacking(multi_agent=True)`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.connectors.core import EMPTY_CONTEXT, Connector, Context, Spaces
from rljax_offline.episode.multi_agent import MultiAgentEpisode
from rljax_offline.errors import ConfigError, ModuleSpaceMismatchError

OBS, ACTIONS, REWARDS = "obs", "actions", "rewards"
TERMINATEDS, TRUNCATEDS, AGENT_INDEX = "terminateds", "truncateds", "agent_index"


class ModuleBatch(NamedTuple):
    """A multi-agent batch mapped to modules, with what maps it back to agents.

    Attributes:
      data: `{module_id: {column: array}}`.
      structure: `{module_id: [(eps_id, agent_id), ...]}` in row order (RLlib's
        `memorized_map_structure`).
      counts: rows per structure entry (1 each for env-to-module batches).
      learner: the rows are agent steps (learner) rather than one per agent (env-to-module).
    """

    data: dict
    structure: dict
    counts: dict
    learner: bool = False


def module_spaces(observation_space: dict, action_space: dict,
                  agent_to_module: Callable | dict) -> dict:
    """`{module_id: Spaces}` from per-agent spaces; agents mapped to one module must share
    their spaces (`ModuleSpaceMismatchError` names both agents and the module).

    Args:
      observation_space: agent id -> observation space.
      action_space: agent id -> action space.
      agent_to_module: `(agent_id, episode) -> module_id`, or a dict agent id -> module id.

    Returns:
      module id -> its `Spaces`.

    Raises:
      ModuleSpaceMismatchError: two agents of one module with different spaces.
    """
    out: dict = {}
    owner: dict = {}
    for agent_id in observation_space:
        mid = agent_to_module[agent_id] if isinstance(agent_to_module, dict) else \
            agent_to_module(agent_id, None)
        spaces = Spaces.of(observation_space[agent_id], action_space.get(agent_id))
        if mid in out and out[mid] != spaces:
            raise ModuleSpaceMismatchError(
                f"agents {owner[mid]!r} and {agent_id!r} are mapped to module {mid!r} but "
                f"have different spaces ({out[mid]} vs {spaces}): map them to different "
                "modules or give them the same spaces")
        out.setdefault(mid, spaces)
        owner.setdefault(mid, agent_id)
    return out


def agent_items(episodes: Sequence[MultiAgentEpisode], *,
                as_learner_connector: bool = False) -> dict:
    """RLlib's multi-agent batch `{column: {(eps_id, agent_id, module_id): [items]}}`.

    Env-to-module: each agent that stepped last contributes its latest observation. Learner:
    every agent contributes its steps' observations, actions, rewards, done flags and model
    outputs (RLlib's `AddColumnsFromEpisodesToTrainBatch`).

    Args:
      episodes: the multi-agent episodes.
      as_learner_connector: every step (learner) instead of each agent's latest observation.
    """
    batch: dict = {}

    def add(column, key, items):
        batch.setdefault(column, {}).setdefault(key, []).extend(items)

    for ep in episodes:
        agents = sorted(ep.agent_ids, key=str) if as_learner_connector else sorted(
            ep.get_agents_that_stepped(), key=str)
        for a in agents:
            sa = ep.agent_episodes[a]
            key = (ep.id_, a, sa.module_id)
            if not as_learner_connector:
                add(OBS, key, [sa.get_observations(-1)])
                continue
            n = len(sa)
            if n == 0:  # RLlib adds no key for an agent without steps
                continue
            add(OBS, key, list(_rows(sa.get_observations(slice(0, n)), n)))
            add(ACTIONS, key, list(_rows(sa.get_actions(slice(0, n)), n)))
            add(REWARDS, key, list(_rows(sa.get_rewards(slice(0, n)), n)))
            add(TERMINATEDS, key, [False] * (n - 1) + [sa.is_terminated])
            add(TRUNCATEDS, key, [False] * (n - 1) + [sa.is_truncated])
            for k in sa.extra_model_outputs:
                add(k, key, list(_rows(sa.get_extra_model_outputs(k, slice(0, n)), n)))
    return batch


def _rows(data: Any, n: int):
    for i in range(n):
        yield jax.tree_util.tree_map(lambda x, i=i: np.asarray(x)[i], data)


def agent_to_module_mapping(batch: dict, episodes: Sequence[MultiAgentEpisode], *,
                            as_learner_connector: bool = False,
                            agent_ids: Sequence | None = None) -> ModuleBatch:
    """RLlib's `AgentToModuleMapping` (then items stacked): `{module_id: {column: array}}`.

    Env-to-module keeps only agents that are to act (`get_agents_to_act()`). Each module
    gets an `agent_index` column: the agent's position in `agent_ids` (default: every agent
    of the episodes, sorted).

    Args:
      batch: the item batch `agent_items` made.
      episodes: the multi-agent episodes it was made from.
      as_learner_connector: the batch holds agent steps (learner).
      agent_ids: the agents whose position is `agent_index` (default: all, sorted).
    """
    if as_learner_connector:
        keep = None
    else:
        keep = {(ep.id_, a) for ep in episodes for a in ep.get_agents_to_act()}
    if agent_ids is None:
        agent_ids = sorted({a for ep in episodes for a in ep.agent_ids}, key=str)
    index = {a: i for i, a in enumerate(agent_ids)}
    structure: dict = {}
    counts: dict = {}
    lists: dict = {}
    first = next(iter(batch.values()), {})
    for (eps_id, agent_id, module_id), items in first.items():
        if keep is None or (eps_id, agent_id) in keep:
            structure.setdefault(module_id, []).append((eps_id, agent_id))
            counts.setdefault(module_id, []).append(len(items))
    for column, agent_data in batch.items():
        for (eps_id, agent_id, module_id), items in agent_data.items():
            if keep is not None and (eps_id, agent_id) not in keep:
                continue
            lists.setdefault(module_id, {}).setdefault(column, []).extend(items)
            if column == next(iter(batch)):
                if agent_id not in index:
                    raise ConfigError(f"agent {agent_id!r} is not in agent_ids {agent_ids}")
                lists[module_id].setdefault(AGENT_INDEX, []).extend(
                    [index[agent_id]] * len(items))
    data = {m: {c: _stack(v) for c, v in cols.items()} for m, cols in lists.items()}
    return ModuleBatch(data, structure, counts, as_learner_connector)


def _stack(items: list) -> Any:
    if not items:
        return np.zeros((0,))
    return jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *items)


def module_to_agent_unmapping(mb: ModuleBatch) -> dict:
    """Back to `{column: {(eps_id, agent_id, module_id): value}}`: one row per key for
    env-to-module batches, the key's rows (an array) for learner batches.

    Args:
      mb: the `ModuleBatch` (with the columns the module added).
    """
    out: dict = {}
    for mid, cols in mb.data.items():
        keys, counts = mb.structure.get(mid, []), mb.counts.get(mid, [])
        bounds = np.concatenate([[0], np.cumsum(counts)]).astype(int)
        for column, values in cols.items():
            if column == AGENT_INDEX:
                continue
            for (eps_id, agent_id), n, a in zip(keys, counts, bounds[:-1]):
                value = jax.tree_util.tree_map(
                    lambda x, a=a, n=n: x[a:a + n] if mb.learner else x[a], values)
                out.setdefault(column, {})[(eps_id, agent_id, mid)] = value
    return out


def agent_one_hot(num_agents: int, column: str = OBS) -> Callable[[dict], dict]:
    """A pure (jit-able) function on one module's columns: `column` (a flat Box observation)
    gets the one-hot `agent_index` appended, so one shared network tells identical agents
    apart.

    Args:
      num_agents: the one-hot's width (the number of agent ids).
      column: the observation column to extend.
    """

    def apply(cols: dict) -> dict:
        oh = jax.nn.one_hot(cols[AGENT_INDEX], num_agents, dtype=cols[column].dtype)
        return {**cols, column: jnp.concatenate([cols[column], oh], axis=-1)}

    return apply


def agent_one_hot_space(spec: Any, num_agents: int) -> sp.BoxSpec:
    """The observation space after `agent_one_hot`: a flat Box `(d,)` becomes `(d + n,)`.

    Args:
      spec: the flat Box observation spec.
      num_agents: the one-hot's width.
    """
    if not isinstance(spec, sp.BoxSpec) or len(spec.shape) != 1:
        raise ConfigError(f"agent_one_hot needs a flat Box observation space, got {spec}")
    low = tuple(np.broadcast_to(spec.low, spec.shape).tolist()) + (0.0,) * num_agents
    high = tuple(np.broadcast_to(spec.high, spec.shape).tolist()) + (1.0,) * num_agents
    return sp.BoxSpec(shape=(spec.shape[0] + num_agents,), dtype=spec.dtype, low=low,
                      high=high)


def global_state_column(mb: ModuleBatch, episodes: Sequence[MultiAgentEpisode],
                        states: dict, *, column: str = "global_state") -> ModuleBatch:
    """Adds the env's global state to every row: `states[eps_id]` holds one state per entry
    of the env-step map (lookback, then env steps `env_t_started .. env_t`); a learner row
    gets the state of the env step at which its observation was made, an env-to-module row
    the latest.

    Args:
      mb: the `ModuleBatch`.
      episodes: the multi-agent episodes its rows come from.
      states: eps id -> the env's states.
      column: the column to add.
    """
    by_id = {ep.id_: ep for ep in episodes}
    data = {}
    for mid, cols in mb.data.items():
        rows = []
        for (eps_id, agent_id), n in zip(mb.structure[mid], mb.counts[mid]):
            st = np.asarray(states[eps_id])
            if not mb.learner:
                rows.append(st[-1:])
                continue
            ep = by_id[eps_id]
            entries = ep.env_t_to_agent_t[agent_id]
            where = {e: i for i, e in enumerate(entries) if e != "S"}
            t0 = ep.agent_episodes[agent_id].t_started
            rows.append(st[[where[t0 + j] for j in range(n)]])
        data[mid] = {**cols, column: np.concatenate(rows) if rows else np.zeros((0,))}
    return mb._replace(data=data)


def apply_per_module(pipelines: dict, states: dict, batches: dict,
                     ctx: Context = EMPTY_CONTEXT) -> dict:
    """Runs each module's single-agent pipeline (a `Connector`) on its `EpisodeBatch` (one
    row per agent episode: each agent on its own timeline). Returns `{module_id: (episodes,
    batch, state)}`.

    Args:
      pipelines: module id -> its single-agent pipeline.
      states: module id -> that pipeline's state.
      batches: module id -> its `EpisodeBatch` (`module_batches`).
      ctx: the `Context`.
    """
    out = {}
    for mid, episodes in batches.items():
        pipe: Connector = pipelines[mid]
        out[mid] = pipe.apply(states[mid], episodes, {}, ctx)
    return out
