"""One way to turn a config's `env` into an env: a gymnasium id or a factory
`env_config -> env` (RLlib's two forms). Our own envs are registered with gymnasium here, so
their ids work wherever an id does: configs, checkpoints (which keep the id, not code) and the
command line (`--env StatelessCartPole-v1`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from rljax_offline.envs.stateless_cartpole import StatelessCartPole

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
