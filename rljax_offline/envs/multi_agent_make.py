"""Multi-agent env ids on the command line: short spellings that stand for the
`"module:function"` form `envs.make.multi_agent_env_factory` takes (and checkpoints save).

* `mpe2:<env>`: an mpe2 env as a PettingZoo parallel env, e.g. `mpe2:simple_spread_v3`
  for `mpe2.simple_spread_v3:parallel_env`.
* `pettingzoo:<module>`: any PettingZoo env module, e.g. `pettingzoo:pettingzoo.classic.rps_v2`
  for `pettingzoo.classic.rps_v2:parallel_env` (`:env`, an AEC env the runner converts, when
  the module has no `parallel_env`).
* `async_agents`: our `AsyncAgentsEnv` (agents at different periods, one terminating early,
  one joining late), needing neither package.
* `module:function` itself, e.g. `mpe2.simple_spread_v3:parallel_env`.

Agent-to-module mappings by name: `shared` (every agent to RLlib's `default_policy`),
`per-agent` (each agent its own module, named by the agent id) or a dict `{agent: module}`.

Example:
    >>> canonical_env_id("mpe2:simple_spread_v3")
    'mpe2.simple_spread_v3:parallel_env'
    >>> env = multi_agent_env_from_id("async_agents", {"max_steps": 6})()
    >>> sorted(env.possible_agents), module_mapping("per-agent", env.possible_agents)["slow"]
    (['fast', 'late', 'slow'], 'slow')
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from typing import Any

from rljax_offline.envs.make import multi_agent_env_factory
from rljax_offline.errors import ConfigError

__all__ = ["ASYNC_AGENTS_ID", "DEFAULT_MODULE_ID", "canonical_env_id", "is_multi_agent_env_id",
           "module_mapping", "multi_agent_env_from_id"]

ASYNC_AGENTS_ID = "async_agents"
DEFAULT_MODULE_ID = "default_policy"  # RLlib's module id when every agent shares one
_PREFIXES = ("mpe2:", "pettingzoo:")
_MODULE_FUNCTION = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def is_multi_agent_env_id(text: str) -> bool:
    """Whether `text` names a multi-agent env (see the module docstring); gymnasium ids
    (`CartPole-v1`, `ale_py:ALE/Pong-v5`) do not.

    Args:
      text: an env id.
    """
    return isinstance(text, str) and (text == ASYNC_AGENTS_ID or text.startswith(_PREFIXES)
                                      or bool(_MODULE_FUNCTION.match(text)))


def canonical_env_id(text: str) -> str:
    """The `"module:function"` form of a multi-agent env id.

    Args:
      text: `mpe2:<env>`, `pettingzoo:<module>`, `async_agents` or `module:function`.
    """
    if text == ASYNC_AGENTS_ID:
        return "rljax_offline.envs.async_agents:AsyncAgentsEnv"
    prefix, _, name = text.partition(":")
    if prefix in ("mpe2", "pettingzoo"):  # the short forms: a package's env module
        if not name:
            raise ConfigError(f"multi-agent env id {text!r} names no env after {prefix!r}: "
                              "e.g. mpe2:simple_spread_v3")
        module = f"mpe2.{name}" if prefix == "mpe2" else name
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            extra = (" (pip install 'rljax-offline[multiagent]' installs pettingzoo and mpe2)"
                     if getattr(e, "name", "") in ("mpe2", "pettingzoo") else "")
            raise ConfigError(f"multi-agent env {text!r}: cannot import {module!r}: {e}"
                              f"{extra}") from None
        for fn in ("parallel_env", "env"):
            if hasattr(mod, fn):
                return f"{module}:{fn}"
        raise ConfigError(f"multi-agent env {text!r}: module {module!r} has neither "
                          "parallel_env nor env (not a PettingZoo env module)")
    if _MODULE_FUNCTION.match(text):
        return text
    raise ConfigError(f"{text!r} is not a multi-agent env id (give mpe2:<env>, "
                      f"pettingzoo:<module>, {ASYNC_AGENTS_ID} or module:function)")


def multi_agent_env_from_id(text: str, env_config: dict | None = None) -> Callable[[], Any]:
    """A no-argument function making one env of the multi-agent id `text`; the config is
    tried once here, so a wrong key is named now, not inside the runner.

    Args:
      text: a multi-agent env id (see the module docstring).
      env_config: keyword arguments of the env's constructor (e.g. `{"N": 3,
        "max_cycles": 25, "continuous_actions": True}` for simple_spread).
    """
    cfg = dict(env_config or {})
    make = multi_agent_env_factory(canonical_env_id(text), cfg)
    try:
        make()
    except TypeError as e:
        raise ConfigError(f"multi-agent env {text!r} does not take env_config {cfg}: {e}") \
            from None
    return make


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
