"""Values against spaces, checked at read time so nothing is ever trained on silently.

Every episode read (episode rows, tabular rows, SampleBatch JSON) passes `check_episode`:
rewards must be finite numbers; observations and actions must match the spaces given to the
reader, or else the spaces the episode itself carries: shape, a numeric dtype, no NaN, inf only
where the Box bound is infinite, Discrete / MultiDiscrete / MultiBinary values in range. A
violation is an `OfflineDataError` naming file, row and column.

Finite Box actions outside the space's bounds are data, not errors: RLlib's EnvRunner records
the module's sampled action and clips only the copy it sends to the env, so every recording of
a Gaussian policy on a bounded Box holds some. `actions_outside_bounds` counts them (what
`rljax-offline inspect` reports); each algorithm says in its docstring how it learns from them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.errors import OfflineDataError


def _fail(message: str, loc: dict, column: str) -> OfflineDataError:
    return OfflineDataError(message, column=column, **loc)


def _numeric(x: Any, what: str, loc, column) -> np.ndarray:
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as e:
        raise _fail(f"{what} is not an array of numbers: {e}", loc, column) from None
    if arr.dtype.kind not in "biuf":
        raise _fail(f"{what} must be numbers, got dtype {arr.dtype} (strings, nulls or "
                    "objects are not allowed)", loc, column)
    return arr


def _first_bad(mask: np.ndarray) -> int:
    return int(np.argwhere(mask.reshape(len(mask), -1).any(axis=1))[0, 0])


def _check_leaf(values: Any, spec: Any, what: str, loc, column) -> None:
    arr = _numeric(values, what, loc, column)
    shape = tuple(getattr(spec, "shape", ()))
    if tuple(arr.shape[1:]) != shape:
        raise _fail(f"{what} have shape {tuple(arr.shape[1:])} per step but the space {spec} "
                    f"expects {shape}", loc, column)
    if not len(arr):
        return
    if isinstance(spec, sp.BoxSpec):
        low = np.asarray(spec.low, np.float64).reshape(shape)
        high = np.asarray(spec.high, np.float64).reshape(shape)
        if arr.dtype.kind == "f":
            nan = np.isnan(arr)
            if nan.any():
                raise _fail(f"{what} hold NaN (step {_first_bad(nan)}); the space {spec} does "
                            "not allow it", loc, column)
            inf = np.isinf(arr) & ~(np.isinf(low) | np.isinf(high))
            if inf.any():
                raise _fail(f"{what} hold inf (step {_first_bad(inf)}) where the space bounds "
                            "are finite", loc, column)
        return
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.round(arr))
        if bad.any():
            raise _fail(f"{what} must be whole numbers for {spec}, step {_first_bad(bad)} "
                        f"has {arr.reshape(len(arr), -1)[_first_bad(bad)].tolist()}", loc,
                        column)
    if isinstance(spec, sp.DiscreteSpec):
        lo, hi = spec.start, spec.start + spec.n
    elif isinstance(spec, sp.MultiDiscreteSpec):
        start = np.asarray(spec.start or (0,) * len(spec.nvec)).reshape(shape)
        lo, hi = start, start + np.asarray(spec.nvec).reshape(shape)
    else:  # MultiBinary
        lo, hi = 0, 2
    out = (arr < lo) | (arr >= hi)
    if out.any():
        step = _first_bad(out)
        raise _fail(f"{what} at step {step} are outside {spec}: "
                    f"{np.asarray(arr[step]).tolist()}", loc, column)


def _walk(values: Any, spec: Any, what: str, loc, column) -> None:
    if isinstance(spec, sp.DictSpec):
        if not isinstance(values, dict):
            raise _fail(f"{what} must be a dict for {spec}, got {type(values).__name__}",
                        loc, column)
        for key, sub in spec.items():
            if key not in values:
                raise _fail(f"{what} miss key {key!r} of the Dict space", loc, column)
            _walk(values[key], sub, f"{what}[{key!r}]", loc, column)
    elif isinstance(spec, sp.TupleSpec):
        if not isinstance(values, (tuple, list)) or len(values) != len(spec.spaces):
            raise _fail(f"{what} must be a tuple of {len(spec.spaces)} for {spec}", loc,
                        column)
        for i, sub in enumerate(spec.spaces):
            _walk(values[i], sub, f"{what}[{i}]", loc, column)
    else:
        _check_leaf(values, spec, what, loc, column)


def check_episode(episode: Any, *, observation_space: Any = None, action_space: Any = None,
                  file: str | None = None, row: int | None = None,
                  line: int | None = None) -> None:
    """Raises `OfflineDataError` when `episode` holds values its spaces do not allow.

    Readers call it for every episode, so data outside its spaces (NaN observations, actions
    past a Discrete space's size) fails where it is read, naming where it sits, and never
    reaches a loss.

    Args:
      episode: the `Episode` to check.
      observation_space: the space the observations must lie in (default: the episode's own).
      action_space: the space the actions must lie in (default: the episode's own).
      file: the file the episode came from, named by the error.
      row: its row in that file.
      line: its line (JSON input).

    Raises:
      OfflineDataError: a value outside its space, naming the file, row or line and column.
    """
    loc = {"file": file, "row": row, "line": line}
    rewards = _numeric(episode.rewards, "rewards", loc, "rewards")
    if rewards.dtype.kind == "f" and not np.isfinite(rewards).all():
        step = int(np.argwhere(~np.isfinite(rewards))[0, 0])
        raise _fail(f"rewards hold {rewards[step]} at step {step}; rewards must be finite",
                    loc, "rewards")
    obs_spec = sp.to_spec(observation_space) or episode.observation_space_spec
    act_spec = sp.to_spec(action_space) or episode.action_space_spec
    if obs_spec is not None:
        _walk(episode.observations, obs_spec, "observations", loc, "obs")
    if act_spec is not None:
        _walk(episode.actions, act_spec, "actions", loc, "actions")


def actions_outside_bounds(actions: Any, spec: Any, path: str = "actions") -> dict:
    """`{column: (steps, steps outside, largest distance outside)}` for each Box leaf of an
    episode's actions (`actions`, `actions['key']`, `actions[0]` for Dict / Tuple spaces).

    A step counts once when any of its dimensions lies outside `[low, high]`; the distance is
    how far the farthest dimension lies beyond its bound (0.0 when none does).

    Args:
      actions: the episode's actions (a pytree for Dict/Tuple spaces).
      spec: the action space's spec.
      path: the column name of the top level.
    """
    spec = sp.to_spec(spec)
    if isinstance(spec, sp.DictSpec):
        return {k: v for key, sub in spec.items()
                for k, v in actions_outside_bounds(actions[key], sub, f"{path}[{key!r}]").items()}
    if isinstance(spec, sp.TupleSpec):
        return {k: v for i, sub in enumerate(spec.spaces)
                for k, v in actions_outside_bounds(actions[i], sub, f"{path}[{i}]").items()}
    if not isinstance(spec, sp.BoxSpec):
        return {}
    arr = np.asarray(actions, np.float64).reshape(len(actions), -1)
    low = np.broadcast_to(np.asarray(spec.low, np.float64).reshape(-1), arr.shape[1:])
    high = np.broadcast_to(np.asarray(spec.high, np.float64).reshape(-1), arr.shape[1:])
    beyond = np.maximum(low - arr, arr - high).clip(min=0.0) if len(arr) else arr
    out = int((beyond > 0).any(axis=1).sum()) if len(arr) else 0
    return {path: (len(arr), out, float(beyond.max()) if beyond.size else 0.0)}
