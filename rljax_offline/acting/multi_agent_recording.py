"""Recording a multi-agent env named by id (what `rljax-offline record --env mpe2:...`
runs): one uniformly random policy per module (with its `action_logp`), stepped by
`MultiAgentEnvRunner`, written as multi-agent episode rows or the per-module tabular layout.

Example:
    >>> import tempfile
    >>> info = record_multi_agent("async_agents", tempfile.mkdtemp(), num_episodes=2,
    ...                           module_mapping_spec="per-agent")
    >>> info["modules"], len(info["files"])
    (['fast', 'late', 'slow'], 2)
"""

from __future__ import annotations

from typing import Any

from rljax_offline.acting.multi_agent_runner import (
    MultiAgentEnvRunner,
    probe_agent_spaces,
    random_policy,
)
from rljax_offline.connectors.multi_agent import module_spaces
from rljax_offline.envs.multi_agent_make import (
    canonical_env_id,
    module_mapping,
    multi_agent_env_from_id,
)

__all__ = ["record_multi_agent"]


def record_multi_agent(env: str, output: str, *, num_episodes: int,
                       env_config: dict | None = None, module_mapping_spec: Any = "shared",
                       num_envs: int = 1, seed: int = 0, tabular: bool = False,
                       max_episodes_per_file: int | None = None) -> dict:
    """Records `num_episodes` episodes of random actions in the multi-agent env `env`.

    Args:
      env: a multi-agent env id (`mpe2:simple_spread_v3`, `pettingzoo:<module>`,
        `async_agents`, `module:function`; see `envs.multi_agent_make`).
      output: the output folder.
      num_episodes: complete multi-agent episodes to record.
      env_config: the env constructor's keyword arguments.
      module_mapping_spec: `"shared"`, `"per-agent"` or `{agent: module}`; agents of one
        module must share their spaces (`ModuleSpaceMismatchError` otherwise).
      num_envs: env copies stepped together.
      seed: env reset seeds and the policies' RNG.
      tabular: write one row per agent step, one folder per module, instead of episode rows.
      max_episodes_per_file: episode rows: start a new file pair after this many episodes.

    Returns:
      `{"files": [...], "modules": [...], "agents": [...], "env": the "module:function"
      form of `env` (what a multi-agent config's `env` takes)}`.
    """
    make = multi_agent_env_from_id(env, env_config)
    agents, obs_spaces, act_spaces = probe_agent_spaces(make)
    mapping = module_mapping(module_mapping_spec, agents)
    spaces = module_spaces(obs_spaces, act_spaces, mapping)
    first = {}
    for a in agents:
        first.setdefault(mapping[a], a)
    policies = {m: random_policy(act_spaces[first[m]]) for m in spaces}
    runner = MultiAgentEnvRunner(make, policies, agent_to_module_mapping_fn=mapping,
                                 num_envs=num_envs, seed=seed)
    if tabular:
        from rljax_offline.data.multi_agent_tabular import write_multi_agent_tabular
        files = write_multi_agent_tabular(runner.episodes(num_episodes), output)
    else:
        files = runner.record(output, num_episodes, max_episodes_per_file=max_episodes_per_file)
    return {"files": files, "modules": sorted(spaces), "agents": [str(a) for a in agents],
            "env": canonical_env_id(env)}
