"""Multi-agent env ids: how a string names a multi-agent env, on the command line and in
configs, beside gymnasium's single-agent ids.

* `mpe2:<env>`: an mpe2 env as a PettingZoo parallel env, e.g. `mpe2:simple_spread_v3`
  (`mpe2.simple_spread_v3.parallel_env(**env_config)`).
* `pettingzoo:<module>`: any PettingZoo env module that has `parallel_env` (or `env`, an AEC
  env, which the runner converts), e.g. `pettingzoo:pettingzoo.classic.rps_v2`.
* `async_agents`: our `AsyncAgentsEnv` (RLlib-style dicts; agents at different periods,
  one terminating early, one joining late), needing neither package.

Agent-to-module mappings by name: `shared` (every agent to RLlib's `default_policy`),
`per-agent` (each agent its own module, named by the agent id) or a dict `{agent: module}`.

Example:
    >>> make = multi_agent_env_factory("async_agents", {"max_steps": 6})
    >>> env = make()
    >>> sorted(env.possible_agents), module_mapping("per-agent", env.possible_agents)["slow"]
    (['fast', 'late', 'slow'], 'slow')
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from rljax_offline.errors import ConfigError

__all__ = ["ASYNC_AGENTS_ID", "DEFAULT_MODULE_ID", "is_multi_agent_env_id",
           "module_mapping", "multi_agent_env_factory"]

ASYNC_AGENTS_ID = "async_agents"
DEFAULT_MODULE_ID = "default_policy"  # RLlib's module id when every agent shares one
_PREFIXES = ("mpe2:", "pettingzoo:")


def is_multi_agent_env_id(text: str) -> bool:
    """Whether `text` names a multi-agent env (see the module docstring).

    Args:
      text: an env id.
    """
    return isinstance(text, str) and (text == ASYNC_AGENTS_ID or text.startswith(_PREFIXES))


def _env_module(text: str):
    prefix, _, name = text.partition(":")
    if not name:
        raise ConfigError(f"multi-agent env id {text!r} names no env after {prefix!r}: "
                          f"e.g. mpe2:simple_spread_v3")
    module = f"mpe2.{name}" if prefix == "mpe2" else name
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        extra = (" (pip install 'rljax-offline[multiagent]' installs pettingzoo and mpe2)"
                 if getattr(e, "name", "") in ("mpe2", "pettingzoo") else "")
        raise ConfigError(f"multi-agent env {text!r}: cannot import {module!r}: {e}"
                          f"{extra}") from None
    if not (hasattr(mod, "parallel_env") or hasattr(mod, "env")):
        raise ConfigError(f"multi-agent env {text!r}: module {module!r} has neither "
                          "parallel_env nor env (not a PettingZoo env module)")
    return mod


def multi_agent_env_factory(text: str, env_config: dict | None = None) -> Callable[[], Any]:
    """A no-argument function making one env of the multi-agent id `text`.

    Args:
      text: `mpe2:<env>`, `pettingzoo:<module>` or `async_agents`.
      env_config: keyword arguments of the env's constructor (e.g. `{"N": 3,
        "max_cycles": 25, "continuous_actions": True}` for simple_spread).
    """
    cfg = dict(env_config or {})
    if text == ASYNC_AGENTS_ID:
        from rljax_offline.envs.async_agents import AsyncAgentsEnv
        make = AsyncAgentsEnv
    elif not is_multi_agent_env_id(text):
        raise ConfigError(f"{text!r} is not a multi-agent env id (give mpe2:<env>, "
                          f"pettingzoo:<module> or {ASYNC_AGENTS_ID})")
    else:
        mod = _env_module(text)
        make = getattr(mod, "parallel_env", None) or mod.env
    try:
        make(**cfg)  # fail now, naming the config, not inside the runner
    except TypeError as e:
        raise ConfigError(f"multi-agent env {text!r} does not take env_config {cfg}: {e}") \
            from None
    return lambda: make(**cfg)


def module_mapping(spec: str | dict, agents: Sequence) -> dict:
    """`{agent: module_id}` for `agents` from a mapping spec.

    Args:
      spec: `"shared"` (every agent to `default_policy`), `"per-agent"` (module id = agent
        id) or a dict `{agent: module}` naming every agent.
      agents: the env's possible agents.
    """
    if spec == "shared":
        return {a: DEFAULT_MODULE_ID for a in agents}
    if spec == "per-agent":
        return {a: str(a) for a in agents}
    if isinstance(spec, dict):
        missing = [a for a in agents if str(a) not in spec and a not in spec]
        if missing:
            raise ConfigError(f"the agent-to-module mapping names no module for agents "
                              f"{missing} (env agents: {list(agents)})")
        return {a: str(spec[a] if a in spec else spec[str(a)]) for a in agents}
    raise ConfigError(f"agent-to-module mapping must be 'shared', 'per-agent' or a dict, got "
                      f"{spec!r}")
