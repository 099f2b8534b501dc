"""The one protocol `EnvRunner` speaks to whatever chooses the actions, and the adapter that
brings a plain callable into it.

An actor is told what the envs did and asked what to do next, for `N` envs at once:

* `reset(obs, seed)`: every env was just reset to `obs` (`[N, ...]`); `seed` seeds any
  action sampling;
* `select() -> (actions [N, ...], extras)`: the actions for the envs' latest observations,
  and what to record per step (a dict of `[N, ...]` arrays, e.g. `action_logp`, or None);
* `observe(rewards [N], next_obs [N, ...], fresh [N])`: the env step that followed `select()`;
  where `fresh` is True that env only reset (gymnasium's NEXT_STEP autoreset) and `next_obs`
  is the first observation of its next episode;
* `running(num_envs) -> bool`: whether it holds the envs' latest observations (an actor put
  in mid-stream is reset first);
* `custom_data(env) -> dict`: what the episode env `env` has just started carries in its
  `custom_data` (asked after `reset` and after an `observe` where the env was fresh).

Implemented by `acting.actor.ActorPolicy` (the on-device actor), `acting.behavior.
BehaviorPolicy` (mixed-quality recording) and `CallableActor` (a plain `obs -> actions`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import jax
import numpy as np

_METHODS = ("reset", "select", "observe", "running", "custom_data")


@runtime_checkable
class ActorProtocol(Protocol):
    """What `EnvRunner` drives (see the module docstring)."""

    def reset(self, obs: Any, seed: int) -> None: ...

    def select(self) -> tuple[Any, dict | None]: ...

    def observe(self, rewards: Any, next_obs: Any, fresh: Any) -> None: ...

    def running(self, num_envs: int) -> bool: ...

    def custom_data(self, env: int) -> dict: ...


def num_rows(obs: Any) -> int:
    """The batch size `N` of observations `[N, ...]` (a dict or tuple of them too).

    Args:
      obs: the observations.
    """
    return int(np.shape(jax.tree_util.tree_leaves(obs)[0])[0])


class CallableActor:
    """A plain callable `obs [N, ...] -> actions` (or `-> (actions, extras)`), e.g. a scripted
    expert, as an actor: it sees the latest observations only.

    Args:
      fn: the callable, `obs [N, ...] -> actions` or `-> (actions, extras)`.
    """

    def __init__(self, fn: Callable):
        self.fn = fn
        self._obs = None
        self._num_envs = 0

    def reset(self, obs, seed: int) -> None:
        del seed
        self._obs, self._num_envs = obs, num_rows(obs)

    def select(self) -> tuple[Any, dict | None]:
        out = self.fn(self._obs)
        return out if isinstance(out, tuple) else (out, None)

    def observe(self, rewards, next_obs, fresh) -> None:
        del rewards, fresh
        self._obs = next_obs

    def running(self, num_envs: int) -> bool:
        return self._num_envs == num_envs

    def custom_data(self, env: int) -> dict:
        return {}


def as_actor(policy: Any) -> ActorProtocol:
    """`policy` as an actor: an object of the protocol as it is, a plain callable wrapped in
    `CallableActor`.

    Args:
      policy: an actor (`reset`, `select`, `observe`, ...) or a plain callable.

    Returns:
      The actor.
    """
    if all(callable(getattr(policy, m, None)) for m in _METHODS):
        return policy
    if callable(policy):
        return CallableActor(policy)
    raise TypeError(f"a policy must be an actor (with {', '.join(_METHODS)}) or a callable "
                    f"obs -> actions, got {type(policy).__name__}")
