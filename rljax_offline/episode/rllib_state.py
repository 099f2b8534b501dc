"""RLlib's episode state dicts: `SingleAgentEpisode.get_state()` / `from_state()` for our
`Episode` (kept out of `episode.py`, which is the data type; this is its wire format, the one
Parquet episode rows hold as msgpack)."""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import jax
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.errors import EpisodeError

_STATE_KEYS = ("id_", "observations", "actions", "rewards", "is_terminated", "is_truncated",
               "t_started", "t")


def _restructure(item: Any, spec: sp.SpaceSpec | None) -> Any:
    """msgpack turns tuples into lists: give Tuple-space data back its tuples."""
    if isinstance(spec, sp.TupleSpec) and isinstance(item, (list, tuple)):
        return tuple(_restructure(x, s) for x, s in zip(item, spec.spaces))
    if isinstance(spec, sp.DictSpec) and isinstance(item, dict):
        return {k: _restructure(item[k], s) for k, s in spec.items()}
    return item


def _py_scalar(x: Any) -> Any:
    """float64/int64 scalars back to Python numbers, as RLlib's recorder stores them."""
    if isinstance(x, np.float64):
        return float(x)
    if isinstance(x, np.int64):
        return int(x)
    return x


def _unstack(data: Any, n: int) -> list:
    data = jax.tree_util.tree_map(np.asarray, data)
    return [jax.tree_util.tree_map(lambda a, i=i: _py_scalar(a[i]), data) for i in range(n)]


def episode_state(episode: Any, finalized: bool = True) -> dict:
    """RLlib's `SingleAgentEpisode.get_state()` dict.

    `finalized=True` stores each buffer as one array (a nested struct of arrays for
    Dict/Tuple spaces), as RLlib does after `to_numpy()`; `finalized=False` stores lists of
    per-step items, as RLlib's recorder writes them.

    Args:
      episode: the `Episode`.
      finalized: one array per buffer (True) or per-step lists (False).
    """
    lbuf = episode.len_lookback_buffer

    def buffer(data, space_dict):
        n = jax.tree_util.tree_leaves(data)[0].shape[0]
        out = (jax.tree_util.tree_map(np.asarray, data) if finalized else _unstack(data, n))
        return {"data": out, "lookback": lbuf, "finalized": finalized, "space": space_dict}

    obs_sd = None if episode.observation_space_spec is None else sp.space_to_dict(
        episode.observation_space_spec)
    act_sd = None if episode.action_space_spec is None else sp.space_to_dict(
        episode.action_space_spec)
    return {
        "id_": episode.id_,
        "agent_id": episode.agent_id,
        "module_id": episode.module_id,
        "multi_agent_episode_id": episode.multi_agent_episode_id,
        "observations": buffer(episode.observations, obs_sd),
        "actions": buffer(episode.actions, act_sd),
        "rewards": buffer(episode.rewards, dict(_reward_space_dict())),
        "infos": {"data": list(episode.infos), "lookback": lbuf, "finalized": False,
                  "space": None},
        "extra_model_outputs": ({k: buffer(v, None)
                                 for k, v in episode.extra_model_outputs.items()}
                                if episode.extra_model_outputs else None),
        "is_terminated": np.bool_(episode.terminated),
        "is_truncated": np.bool_(episode.truncated),
        "t_started": episode.t_started,
        "t": episode.t,
        "_observation_space": obs_sd,
        "_action_space": act_sd,
        "_start_time": episode.start_time,
        "_last_step_time": episode.last_step_time,
        "custom_data": dict(episode.custom_data),
    }



def episode_from_state(state: dict, episode_cls: type) -> Any:
    """Builds an `episode_cls` (the `Episode`, which imports this module, so it is passed in)
    from RLlib's state dict (finalized or list buffers).

    Args:
      state: RLlib's state dict.
      episode_cls: the class to build.
    """
    if not isinstance(state, dict):
        raise EpisodeError(f"an episode state must be a dict, got {type(state).__name__}")
    missing = [k for k in _STATE_KEYS if k not in state]
    if missing:
        raise EpisodeError(f"episode state is missing keys {missing}")
    obs_space = _space_or_none(state.get("_observation_space"),
                               state["observations"], "observations")
    act_space = _space_or_none(state.get("_action_space"), state["actions"], "actions")
    obs_spec, act_spec = sp.to_spec(obs_space), sp.to_spec(act_space)

    lookbacks = {}

    def data_of(name, buf, spec):
        if not isinstance(buf, dict) or "data" not in buf:
            raise EpisodeError(f"episode state field {name!r} must be a buffer dict with "
                               f"'data' and 'lookback', got {type(buf).__name__}")
        lookbacks[name] = int(buf.get("lookback", 0))
        data = buf["data"]
        if isinstance(data, list) and isinstance(spec, (sp.TupleSpec, sp.DictSpec)):
            return [_restructure(x, spec) for x in data]
        return _restructure(data, spec)

    obs = data_of("observations", state["observations"], obs_spec)
    act = data_of("actions", state["actions"], act_spec)
    rew = data_of("rewards", state["rewards"], None)
    infos = None
    if state.get("infos") is not None:
        infos = data_of("infos", state["infos"], None)
        if not isinstance(infos, list):
            raise EpisodeError("episode state field 'infos' must hold a list")
    emo = {k: data_of(f"extra_model_outputs[{k!r}]", v, None)
           for k, v in (state.get("extra_model_outputs") or {}).items()}
    if len(set(lookbacks.values())) > 1:
        raise EpisodeError(f"episode state buffers have different lookback sizes "
                           f"{lookbacks}; all must be equal")
    lookback = next(iter(lookbacks.values()))
    if infos is not None and len(infos) == 0:
        infos = None
    ep = episode_cls(
        observations=obs, actions=act, rewards=rew, infos=infos, extra_model_outputs=emo,
        terminated=bool(state["is_terminated"]), truncated=bool(state["is_truncated"]),
        id_=state["id_"], agent_id=state.get("agent_id"), module_id=state.get("module_id"),
        multi_agent_episode_id=state.get("multi_agent_episode_id"),
        t_started=int(state["t_started"]), len_lookback_buffer=lookback,
        observation_space=obs_spec, action_space=act_spec,
        custom_data=state.get("custom_data") or {},
        start_time=state.get("_start_time"), last_step_time=state.get("_last_step_time"))
    if int(state["t"]) != ep.t:
        raise EpisodeError(f"episode state {state['id_']!r} is inconsistent: t={state['t']} "
                           f"but t_started={ep.t_started} plus {len(ep)} steps gives {ep.t}")
    return ep




@functools.lru_cache(maxsize=1)
def _reward_space_dict() -> dict:
    """RLlib's rewards buffer always carries `Box(-inf, inf, (), float32)`."""
    return sp.space_to_dict(gym.spaces.Box(float("-inf"), float("inf"), (), np.float32))


def _space_or_none(top: Any, buf: Any, name: str):
    d = top if top is not None else (buf.get("space") if isinstance(buf, dict) else None)
    if d is None:
        return None
    try:
        key = _frozen(d)
    except TypeError:  # unhashable junk: let space_from_dict name the problem
        key = None
    try:
        return _cached_spec(key) if key is not None else sp.space_from_dict(d)
    except sp.SpaceError as e:
        raise EpisodeError(f"episode state field {name!r}: {e}") from e


def _frozen(x: Any) -> Any:
    """A hashable copy of a space dict (every episode row of a data set repeats it)."""
    if isinstance(x, dict):
        return ("__dict__", tuple((k, _frozen(v)) for k, v in x.items()))
    if isinstance(x, list):
        return ("__list__", tuple(_frozen(v) for v in x))
    hash(x)
    return x


def _thawed(x: Any) -> Any:
    if isinstance(x, tuple) and len(x) == 2 and x[0] == "__dict__":
        return {k: _thawed(v) for k, v in x[1]}
    if isinstance(x, tuple) and len(x) == 2 and x[0] == "__list__":
        return [_thawed(v) for v in x[1]]
    return x


@functools.lru_cache(maxsize=64)
def _cached_spec(key: Any) -> sp.SpaceSpec:
    """Space dict -> spec, decoded once per distinct dict rather than once per episode row
    (what decoding Box bounds costs is on the benchmarks page)."""
    return sp.to_spec(sp.space_from_dict(_thawed(key)))
