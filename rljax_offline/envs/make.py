"""One way to turn a config's `env` into an env: a gymnasium id or a factory
`env_config -> env` (RLlib's two forms). Our own envs are registered with gymnasium here, so
their ids work wherever an id does: configs, checkpoints (which keep the id, not code) and the
command line (`--env StatelessCartPole-v1`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from rljax_offline.envs.stateless_cartpole import StatelessCartPole
from rljax_offline.errors import ConfigError

STATELESS_CARTPOLE_ID = "StatelessCartPole-v1"


def _stateless_cartpole(**kwargs) -> gym.Env:
    return StatelessCartPole(gym.make("CartPole-v1", **kwargs))


def register_envs() -> None:
    """Register our env ids with gymnasium (idempotent)."""
    if STATELESS_CARTPOLE_ID not in gym.registry:
        gym.register(STATELESS_CARTPOLE_ID, entry_point=_stateless_cartpole)


def env_factory(env: Any, env_config: dict | None = None) -> Callable[[], gym.Env]:
    """A no-argument function that makes one env of `env` (an id or a factory).

    Args:
      env: a gymnasium id (`"CartPole-v1"`, `"StatelessCartPole-v1"`) or a factory
        `env_config -> gym.Env`.
      env_config: keyword arguments of `gym.make`, or the factory's argument.
    """
    cfg = dict(env_config or {})
    if isinstance(env, str):
        register_envs()
        return lambda: gym.make(env, **cfg)
    if callable(env):
        return lambda: env(dict(cfg))
    raise TypeError(f"env must be a gymnasium id or a factory, got {type(env).__name__}")


def make_env(env: Any, env_config: dict | None = None) -> gym.Env:
    """One env of `env` (an id or a factory `env_config -> env`).

    Args:
      env: a gymnasium id or a factory `env_config -> gym.Env`.
      env_config: keyword arguments of `gym.make`, or the factory's argument.
    """
    return env_factory(env, env_config)()


def multi_agent_env_factory(env: Any, env_config: dict | None = None) -> Callable[[], Any]:
    """A no-argument function that makes one multi-agent env (a PettingZoo parallel env or
    an RLlib-style dict env).

    Args:
      env: a factory `env_config -> env`, or `"module:function"`, a function imported and
        called with `env_config` as keyword arguments (e.g.
        `"mpe2.simple_spread_v3:parallel_env"`); the string form is saved with
        checkpoints, a factory must be passed again.
      env_config: the factory's argument, or the function's keyword arguments.

    Raises:
      ConfigError: `env` is neither, or names nothing importable.
    """
    cfg = dict(env_config or {})
    if callable(env):
        return lambda: env(dict(cfg))
    if isinstance(env, str) and env.count(":") == 1:
        module_name, attr = env.split(":")
        try:
            fn = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as e:
            raise ConfigError(f"env {env!r}: cannot import {attr!r} from {module_name!r} "
                              f"({e}); a multi-agent env is 'module:function' or a factory "
                              "env_config -> env") from None
        return lambda: fn(**cfg)
    raise ConfigError(f"a multi-agent env is a factory env_config -> env or "
                      f"'module:function' (e.g. 'mpe2.simple_spread_v3:parallel_env'), "
                      f"got {env!r}")
