"""The modules of a multi-agent config: which agent each maps to, each module's own
single-agent config, spaces, spec and pipelines, and the groups trained stacked together.

RLlib's semantics: `policies` names the modules (RLlib's `MultiRLModuleSpec`), with per-module
config overrides; `policy_mapping_fn(agent_id, episode)` picks an agent's module (default:
every agent shares `default_policy`, full parameter sharing); agents mapped to one module must
have the same spaces. Modules whose config and spaces are equal (and whose batches have the
same size) are one group: one `LearningSpec`, their states stacked and stepped under `vmap`
(`learning.multi_module`). Every registered algorithm trains per module this way, with no
multi-agent code of its own.

An algorithm whose config sets `trains_team_module` (MATD3+BC: a centralised critic) trains
its modules as one team instead (`build_team_module`): one spec learning every module's actor
and a critic on joint rows, one per env step (`connectors.joint_rows`); the modules (agents
of different spaces in modules of their own) act and export as any module.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.algorithms import pipelines
from rljax_offline.algorithms.config import DEFAULT_MODULE_ID, AlgorithmConfig
from rljax_offline.algorithms.pipelines import Pipelines
from rljax_offline.connectors import Spaces
from rljax_offline.errors import ConfigError, ModuleSpaceMismatchError
from rljax_offline.learning.multi_module import ModuleGroup, group_modules
from rljax_offline.learning.spec import AlgorithmSpec

__all__ = ["ModuleSetup", "TeamActor", "agent_mapping", "build_modules", "build_team_module",
           "module_config", "module_groups", "team_id"]

MULTI_AGENT_FIELDS = ("policies", "policy_mapping_fn", "policies_to_train")


class ModuleSetup(NamedTuple):
    """One module of a multi-agent algorithm.

    Attributes:
      config: the module's single-agent config (the shared one with its overrides).
      gym_spaces: `(observation_space, action_space)` of its agents.
      spaces: the same as specs.
      spec: its `AlgorithmSpec`.
      pipelines: its learner, env-to-module and module-to-env pipelines.
      agents: the env's agents mapped to it.
      rows_per_update: rows of its global batch (`count_steps_by`).
    """

    config: AlgorithmConfig
    gym_spaces: tuple
    spaces: Spaces
    spec: AlgorithmSpec
    pipelines: Pipelines
    agents: tuple
    rows_per_update: int


def agent_mapping(config: AlgorithmConfig) -> Callable[[Any, Any], str]:
    """The config's `policy_mapping_fn` as `(agent_id, episode) -> module id`, checked to
    name a module of `policies` (a one-line `ConfigError` names the agent, the module and
    the modules there are).

    Args:
      config: a multi-agent config.
    """
    fn, modules = config.policy_mapping_fn, config.policies

    def mapping(agent_id, episode=None):
        if fn is None:
            module_id = DEFAULT_MODULE_ID
        elif isinstance(fn, Mapping):
            if agent_id not in fn:
                raise ConfigError(f"policy_mapping_fn (a dict) has no module for agent "
                                  f"{agent_id!r}; it maps {sorted(fn, key=str)}")
            module_id = fn[agent_id]
        else:
            module_id = fn(agent_id, episode)
        if module_id not in modules:
            raise ConfigError(f"policy_mapping_fn maps agent {agent_id!r} to module "
                              f"{module_id!r}, which is not in policies {sorted(modules)}")
        return module_id

    return mapping


def module_config(config: AlgorithmConfig, module_id: str) -> AlgorithmConfig:
    """Module `module_id`'s single-agent config: the shared config with the module's
    overrides from `policies` (any option; `model_config` merged into the shared one).

    Args:
      config: a multi-agent config.
      module_id: one of its modules.
    """
    overrides = dict(config.policies.get(module_id) or {})
    fields = {f.name for f in dataclasses.fields(config)}
    unknown = sorted(set(overrides) - fields)
    if unknown or set(overrides) & set(MULTI_AGENT_FIELDS):
        raise ConfigError(f"policies[{module_id!r}] overrides {sorted(overrides)}; a module "
                          f"takes options of {type(config).__name__} other than the "
                          "multi_agent() ones")
    if isinstance(overrides.get("model_config"), dict):
        overrides["model_config"] = {**config.model_config, **overrides["model_config"]}
    return dataclasses.replace(config, **overrides, **dict.fromkeys(MULTI_AGENT_FIELDS))


def build_modules(config: AlgorithmConfig, observation_spaces: Mapping,
                  action_spaces: Mapping, spec_options: Mapping | None = None
                  ) -> dict[str, ModuleSetup]:
    """Every module of `config` for an env with these per-agent spaces: agents mapped, each
    module's config, spec and pipelines built (one spec object for modules of equal config
    and spaces, so they group).

    Args:
      config: a multi-agent config.
      observation_spaces: `{agent_id: gymnasium space}`.
      action_spaces: `{agent_id: gymnasium space}`.
      spec_options: keyword arguments for every module's `make_spec` (MAPPO's
        `value_input`); None: none.

    Raises:
      ConfigError: an agent mapped to an unknown module, a module no agent maps to, agents
        of one module with different spaces (`ModuleSpaceMismatchError`).
    """
    mapping = agent_mapping(config)
    agents: dict[str, list] = {}
    for agent_id in observation_spaces:
        agents.setdefault(mapping(agent_id, None), []).append(agent_id)
    idle = sorted(set(config.policies) - set(agents))
    if idle:
        raise ConfigError(f"policies {idle} have no agent: policy_mapping_fn maps the env's "
                          f"agents {sorted(observation_spaces, key=str)} to {sorted(agents)}")
    built: dict[str, tuple] = {}
    out = {}
    for module_id in sorted(agents):
        first, *rest = agents[module_id]
        gym_spaces = (observation_spaces[first], action_spaces[first])
        for other in rest:
            if (observation_spaces[other], action_spaces[other]) != gym_spaces:
                raise ModuleSpaceMismatchError(
                    f"agents {first!r} and {other!r} map to module {module_id!r} but have "
                    f"different spaces ({gym_spaces} vs {observation_spaces[other]}, "
                    f"{action_spaces[other]}); map them to modules of their own")
        cfg = module_config(config, module_id)
        spaces = Spaces.of(*gym_spaces)
        key = _build_key(cfg, gym_spaces)
        if key not in built:
            built[key] = pipelines.build(cfg, spaces, **(spec_options or {}))
        spec, pipes = built[key]
        per_agent = len(agents[module_id]) if config.count_steps_by == "env_steps" else 1
        out[module_id] = ModuleSetup(cfg, gym_spaces, spaces, spec, pipes,
                                     tuple(agents[module_id]),
                                     cfg.update_batch_size * per_agent)
    return out


class TeamActor(NamedTuple):
    """One module's actor in a team's spec (`config.make_team_spec`).

    Attributes:
      config: the module's config (its actor's networks).
      obs_spec: its agents' observation spec after the learner pipeline's pieces.
      act_spec: their Box action spec after those pieces.
      agents: their indices on the joint rows' agent axis.
    """

    config: AlgorithmConfig
    obs_spec: Any
    act_spec: Any
    agents: tuple


def team_id(module_ids) -> str:
    """The name a team trains and reports under: its module's id for one module, the
    sorted module ids joined by "+" for several (`"listener+speaker"`).

    Args:
      module_ids: the team's modules.
    """
    return "+".join(sorted(module_ids))


def build_team_module(config: AlgorithmConfig, observation_spaces: Mapping,
                      action_spaces: Mapping, state_shape: tuple | None
                      ) -> tuple[dict[str, ModuleSetup], dict[str, ModuleSetup]]:
    """The team of a `trains_team_module` config: one learner unit on joint rows
    (`config.make_team_spec`, `train_batch_size_per_learner` env steps an update) holding
    an actor per module; the modules themselves as `build_modules` makes them (each its
    agents, pipelines and single-agent spec, which acting and export use).

    Args:
      config: a multi-agent config whose class sets `trains_team_module`.
      observation_spaces: `{agent_id: gymnasium space}`.
      action_spaces: `{agent_id: gymnasium space}`.
      state_shape: the env's global state's shape; None: the agents' observations
        concatenated.

    Returns:
      `({team id: the team's ModuleSetup}, {module_id: ModuleSetup})`; the team's holds
      every agent (sorted, the rows' agent order) and its spec, and its module's spaces and
      pipelines when it has one module (None for several).

    Raises:
      ConfigError: an agent mapped to an unknown module, a module with overrides when
        there are several (one team's options), `ModuleSpaceMismatchError` for agents of one
        module with different spaces.
    """
    members = build_modules(config, observation_spaces, action_spaces)
    agents = tuple(sorted(observation_spaces, key=str))
    if len(members) == 1:
        (cfg,) = (m.config for m in members.values())  # the module's overrides, as before
    else:
        overridden = sorted(m for m, o in config.policies.items() if o)
        if overridden:
            raise ConfigError(f"{type(config).__name__} trains its modules as one team with "
                              f"one config: drop the overrides of policies {overridden}")
        cfg = dataclasses.replace(config, **dict.fromkeys(MULTI_AGENT_FIELDS))
    actors = {}
    for module_id, m in members.items():
        out = m.pipelines.learner.out_spaces(m.spaces)
        actors[module_id] = TeamActor(m.config, out.observation, out.action,
                                      tuple(agents.index(a) for a in m.agents))
    if state_shape is None:
        state_shape = (sum(sp.flat_dim(actors[module_id].obs_spec) * len(m.agents)
                           for module_id, m in members.items()),)
    spec = cfg.make_team_spec(actors, len(agents), _state_spec(state_shape))
    # one module: the team has its spaces and pipelines; several: none of its own
    one = next(iter(members.values())) if len(members) == 1 else None
    team = ModuleSetup(cfg, one and one.gym_spaces, one and one.spaces, spec,
                       one and one.pipelines, agents, cfg.update_batch_size)
    return {team_id(members): team}, members


def _state_spec(shape: tuple) -> sp.BoxSpec:
    """An unbounded float32 Box spec of `shape` (a centralised critic's global state)."""
    size = int(np.prod(shape))
    return sp.BoxSpec(shape=tuple(int(s) for s in shape), dtype="float32",
                      low=(-float("inf"),) * size, high=(float("inf"),) * size)


def _build_key(config: AlgorithmConfig, gym_spaces: tuple) -> str:
    """Equal for configs and spaces that build the same spec: the config's JSON, the spaces,
    and the identity of the code it holds (connector factories, which its JSON names only)."""
    code = sorted((f.name, id(getattr(config, f.name))) for f in dataclasses.fields(config)
                  if callable(getattr(config, f.name)))
    return json.dumps([config.to_dict(), repr(gym_spaces), code], sort_keys=True, default=str)


def module_groups(modules: Mapping[str, ModuleSetup]) -> dict[str, ModuleGroup]:
    """The modules that train stacked together: one spec object and one batch size
    (`learning.multi_module.group_modules`).

    Args:
      modules: from `build_modules`.

    Returns:
      `{group name: ModuleGroup}`, each named by its first module.
    """
    return group_modules({m: s.spec.learning for m, s in modules.items()},
                         {m: s.rows_per_update for m, s in modules.items()})
