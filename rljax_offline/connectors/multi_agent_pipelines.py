"""Default multi-agent env-to-module and learner pipelines: multi-agent observation
preprocessors on the episodes, then one single-agent pipeline per module, jitted, over the
module's agent episodes (one `EpisodeBatch` row per agent episode, so every piece runs on each
agent's own timeline).

That is RLlib's `multi_agent=True` for free: `frame_stack(4)` stacks each agent's own last
four observations (RLlib's `FrameStacking(multi_agent=True)`), `mean_std_filter()` keeps one
set of statistics per module (its state lives under the module id) and
`mean_std_filter_per_agent(n)` one per agent, as RLlib's `MeanStdFilter(multi_agent=True)`.
Each row carries its agent's index (`ctx.agent_index` inside the pipeline, an
`agent_index` column in the batch), the agent's position in `agent_ids`; padding rows
(bucketed row counts) have -1, so stateful pieces leave them out of their statistics.

An env-to-module call pads only the steps its pieces read (`Connector.lookback`) of each
agent, so its cost does not grow with the episode's length.

The output is a `ModuleBatch`: `data` `{module_id: batch}`, `structure` `{module_id:
[(multi-agent episode id, agent id), ...]}` one entry per `EpisodeBatch` row, `counts` the
batch rows of each entry (learner: the padded length `T`, `loss_mask` marks real steps;
env-to-module: 1, the agent's latest observation). Env-to-module pieces see every agent that
stepped, as RLlib's (a mean-std filter pushes the final observation of an agent that just
finished too); the batch's first rows, those in `structure`, are the agents to act.

Example:
    >>> import gymnasium as gym, numpy as np
    >>> from rljax_offline.acting.multi_agent_runner import MultiAgentEnvRunner, random_policy
    >>> from rljax_offline.connectors import frame_stack
    >>> from rljax_offline.envs.async_agents import AsyncAgentsEnv
    >>> env = AsyncAgentsEnv()
    >>> obs_spaces = {a: env.observation_space(a) for a in env.possible_agents}
    >>> act_spaces = {a: env.action_space(a) for a in env.possible_agents}
    >>> runner = MultiAgentEnvRunner(AsyncAgentsEnv, {"m": random_policy(act_spaces["fast"])},
    ...                              agent_to_module_mapping_fn={a: "m" for a in obs_spaces})
    >>> learner = default_multi_agent_learner(obs_spaces, act_spaces,
    ...                                       {a: "m" for a in obs_spaces}, frame_stack(2))
    >>> episodes = runner.sample(2)
    >>> mb, state = learner.apply(learner.init(), episodes)
    >>> mb.data["m"]["obs"].shape[-1], int(mb.data["m"]["loss_mask"].sum())
    (4, 38)
    >>> sum(ep.agent_steps() for ep in episodes), mb.structure["m"][:2]
    (38, [(..., 'fast'), (..., 'slow')])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline.connectors.core import EMPTY_CONTEXT, Connector, Context
from rljax_offline.connectors.env_to_module import default_env_to_module
from rljax_offline.connectors.learner import default_learner
from rljax_offline.connectors.multi_agent import AGENT_INDEX, ModuleBatch, module_spaces
from rljax_offline.connectors.observation_preprocessor import (
    MultiAgentObservationPreprocessor,
    preprocessed_spaces,
)
from rljax_offline.episode.batch import EpisodeBatch, bucket_length
from rljax_offline.episode.multi_agent import MultiAgentEpisode
from rljax_offline.episode.multi_agent_chunks import align_extra_model_outputs
from rljax_offline.errors import ConfigError

__all__ = ["MultiAgentPipeline", "default_multi_agent_env_to_module",
           "default_multi_agent_learner"]


class MultiAgentPipeline(NamedTuple):
    """Multi-agent preprocessors, then one jitted single-agent pipeline per module.

    Attributes:
      pipelines: `{module_id: Connector}`.
      module_spaces: `{module_id: Spaces}` the module pipelines start from (after the
        multi-agent preprocessors).
      preprocessors: `MultiAgentObservationPreprocessor`s run on the episodes first.
      agent_ids: every agent, in `agent_index` order.
      as_learner_connector: learner rows (every step) or env-to-module rows (the latest
        observation of each agent to act).
      jitted: `{module_id: jax.jit(pipeline.apply)}`.
      agent_to_module: `{agent_id: module_id}` or `(agent_id, episode) -> module_id`: which
        module's batch an agent's rows go to (whatever module the episodes recorded: data
        recorded with one module per agent can train one shared module).
    """

    pipelines: dict
    module_spaces: dict
    preprocessors: tuple
    agent_ids: tuple
    as_learner_connector: bool
    jitted: dict
    agent_to_module: Any

    def module_of(self, agent_id: Any, episode: MultiAgentEpisode) -> Any:
        """The module `agent_id`'s rows go to.

        Args:
          agent_id: an agent of `episode`.
          episode: the multi-agent episode.
        """
        m = self.agent_to_module
        if isinstance(m, dict):
            if agent_id not in m:
                raise ConfigError(f"agent {agent_id!r} of episode {episode.id_!r} has no "
                                  f"module in agent_to_module (agents: {list(m)})")
            return m[agent_id]
        return m(agent_id, episode)

    def init(self) -> dict:
        """`{module_id: state}`: each module pipeline's state from its spaces."""
        return {m: p.init(self.module_spaces[m]) for m, p in self.pipelines.items()}

    def out_spaces(self) -> dict:
        """`{module_id: Spaces}` after each module's pipeline: what its module is built
        from."""
        return {m: p.out_spaces(self.module_spaces[m]) for m, p in self.pipelines.items()}

    def apply(self, states: dict, episodes: Sequence[MultiAgentEpisode],
              ctx: Context | None = None, *, rows: int | None = None) -> tuple:
        """Runs the pipelines on `episodes`; returns `(ModuleBatch, new states)`.

        Args:
          states: `{module_id: state}` (from `init()` or a previous call).
          episodes: multi-agent episodes (chunks).
          ctx: the context every module pipeline gets (`agent_index` is set per module).
          rows: `EpisodeBatch` rows per module (default: the row count rounded up to a power
            of two), so batches with different agent sets share one compiled shape.
        """
        ctx = EMPTY_CONTEXT if ctx is None else ctx
        eps = list(episodes)
        for p in self.preprocessors:
            eps = p.apply(eps)
        index = {a: i for i, a in enumerate(self.agent_ids)}
        by_module: dict = {}
        acting: dict = {}  # env-to-module: rows of agents to act (first), then done ones
        for ep in eps:
            if self.as_learner_connector:
                agents = list(ep.agent_episodes)
            else:
                to_act = ep.get_agents_to_act()
                agents = sorted(to_act, key=str) + sorted(
                    ep.get_agents_that_stepped() - to_act, key=str)
            for a in agents:
                mid = self.module_of(a, ep)
                sa = ep.agent_episodes[a]
                if not self.as_learner_connector:  # only what the pieces read (`lookback`)
                    need = self.pipelines[mid].lookback if mid in self.pipelines else 0
                    if sa.len_lookback_buffer + len(sa) > need:
                        sa = sa.slice(slice(len(sa), len(sa)), len_lookback_buffer=need)
                by_module.setdefault(mid, []).append(sa)
                acting.setdefault(mid, []).append(self.as_learner_connector or a in to_act)
        for mid, flags in acting.items():  # to-act rows first within each module
            order = sorted(range(len(flags)), key=lambda i: not flags[i])
            by_module[mid] = [by_module[mid][i] for i in order]
            acting[mid] = sum(flags)
        batches = {}
        for mid, v in by_module.items():
            # agents that have not acted yet have no model-output columns
            ref = max(v, key=lambda e: len(e.extra_model_outputs))
            batches[mid] = EpisodeBatch.from_episodes(
                [align_extra_model_outputs(e, ref) for e in v],
                pad_batch_to=rows or bucket_length(len(v), "pow2", 1))
        data, structure, counts, new_states = {}, {}, {}, dict(states)
        for mid, eb in batches.items():
            if mid not in self.pipelines:
                raise ConfigError(f"agent_to_module maps agents of the episodes to module "
                                  f"{mid!r}, which this pipeline was not built for (modules: "
                                  f"{sorted(map(str, self.pipelines))})")
            agent_rows = by_module[mid]
            unknown = {e.agent_id for e in agent_rows} - set(index)
            if unknown:
                raise ConfigError(f"agents {sorted(map(str, unknown))} are not in the "
                                  f"pipeline's agent_ids {list(self.agent_ids)}")
            idx = np.full(eb.batch_size, -1, np.int32)  # -1: a padding row
            idx[:len(agent_rows)] = [index[e.agent_id] for e in agent_rows]
            _, batch, new_states[mid] = self.jitted[mid](
                states[mid], eb, {}, ctx._replace(agent_index=jnp.asarray(idx)))
            per_row = eb.max_len if self.as_learner_connector else 1
            data[mid] = {**batch, AGENT_INDEX: jnp.repeat(jnp.asarray(idx), per_row)}
            kept = agent_rows[:acting[mid]]
            structure[mid] = [(e.multi_agent_episode_id, e.agent_id) for e in kept]
            counts[mid] = [per_row] * len(kept)
        return ModuleBatch(data, structure, counts, self.as_learner_connector), new_states


def _build(observation_space: dict, action_space: dict, agent_to_module: Callable | dict,
           custom: tuple, multi_agent_preprocessors: Sequence, per_module: dict | None,
           agent_ids: Sequence | None, learner: bool, make: Callable) -> MultiAgentPipeline:
    pre = tuple(multi_agent_preprocessors)
    for p in pre:
        if not isinstance(p, MultiAgentObservationPreprocessor):
            raise ConfigError(f"multi_agent_preprocessors takes "
                              f"MultiAgentObservationPreprocessor, got {type(p).__name__}")
    spaces = module_spaces(preprocessed_spaces(pre, observation_space), action_space,
                           agent_to_module)
    per_module = dict(per_module or {})
    unknown = set(per_module) - set(spaces)
    if unknown:
        raise ConfigError(f"per_module names modules {sorted(map(str, unknown))} that no agent "
                          f"is mapped to (modules: {sorted(map(str, spaces))})")
    pipes = {m: make(s, *custom, *per_module.get(m, ())) for m, s in spaces.items()}
    for m, p in pipes.items():
        if not isinstance(p, Connector):
            raise ConfigError(f"module {m!r}: its pipeline is a {type(p).__name__}")
    ids = tuple(agent_ids) if agent_ids is not None else tuple(observation_space)
    return MultiAgentPipeline(pipes, spaces, pre, ids, learner,
                              {m: jax.jit(p.apply) for m, p in pipes.items()}, agent_to_module)


def default_multi_agent_learner(observation_space: dict, action_space: dict,
                                agent_to_module: Callable | dict, *custom: Connector,
                                multi_agent_preprocessors: Sequence = (),
                                per_module: dict | None = None,
                                agent_ids: Sequence | None = None,
                                add_default_connectors: bool = True,
                                max_seq_len: int | None = None,
                                initial_state: Any = None) -> MultiAgentPipeline:
    """The learner side: `multi_agent_preprocessors`, then per module `custom` pieces (and
    that module's `per_module` pieces) in front of `default_learner`'s defaults.

    Args:
      observation_space: `{agent_id: observation space}`.
      action_space: `{agent_id: action space}`.
      agent_to_module: `{agent_id: module_id}` or `(agent_id, episode) -> module_id`; agents
        of one module must share their spaces (`ModuleSpaceMismatchError`).
      *custom: single-agent pieces every module's pipeline starts with (each module keeps its
        own state: per-module statistics).
      multi_agent_preprocessors: `MultiAgentObservationPreprocessor`s, in order.
      per_module: `{module_id: [pieces]}` after `custom` for that module only.
      agent_ids: the `agent_index` order (default: `observation_space`'s keys).
      add_default_connectors: False keeps only the custom pieces.
      max_seq_len: for stateful modules, as `default_learner`.
      initial_state: for stateful modules, as `default_learner`.
    """
    def make(spaces, *pieces):
        return default_learner(spaces, *pieces, add_default_connectors=add_default_connectors,
                               max_seq_len=max_seq_len, initial_state=initial_state)

    return _build(observation_space, action_space, agent_to_module, custom,
                  multi_agent_preprocessors, per_module, agent_ids, True, make)


def default_multi_agent_env_to_module(observation_space: dict, action_space: dict,
                                      agent_to_module: Callable | dict, *custom: Connector,
                                      multi_agent_preprocessors: Sequence = (),
                                      per_module: dict | None = None,
                                      agent_ids: Sequence | None = None,
                                      add_default_connectors: bool = True,
                                      max_seq_len: int | None = None,
                                      initial_state: Any = None) -> MultiAgentPipeline:
    """The env-to-module side: the same pieces as `default_multi_agent_learner`, then
    `default_env_to_module`'s defaults: one row per agent to act (RLlib's
    `get_agents_to_act()`), its latest (preprocessed, stacked, filtered) observation.

    Args:
      observation_space: `{agent_id: observation space}`.
      action_space: `{agent_id: action space}`.
      agent_to_module: `{agent_id: module_id}` or `(agent_id, episode) -> module_id`.
      *custom: single-agent pieces every module's pipeline starts with.
      multi_agent_preprocessors: `MultiAgentObservationPreprocessor`s, in order.
      per_module: `{module_id: [pieces]}` after `custom` for that module only.
      agent_ids: the `agent_index` order (default: `observation_space`'s keys).
      add_default_connectors: False keeps only the custom pieces.
      max_seq_len: for stateful modules, as `default_env_to_module`.
      initial_state: for stateful modules, as `default_env_to_module`.
    """
    def make(spaces, *pieces):
        return default_env_to_module(spaces, *pieces,
                                     add_default_connectors=add_default_connectors,
                                     max_seq_len=max_seq_len, initial_state=initial_state)

    return _build(observation_space, action_space, agent_to_module, custom,
                  multi_agent_preprocessors, per_module, agent_ids, False, make)
