"""`Episode`: the finalized single-agent episode, an immutable JAX pytree with RLlib's API.

It matches RLlib's `SingleAgentEpisode` (getters and setters, from `episode.access`; lookback
buffers, slicing, `cut`, `concat_episode`, `get_state`/`from_state`), except that whatever
mutates in RLlib returns a new `Episode` here. Array leaves are `observations` (one more than
actions; a pytree for Dict/Tuple spaces), `actions`, `rewards` and `extra_model_outputs`; each
holds the lookback buffer at its front, as in RLlib. Static metadata (hashable, in jit's cache
key) is only what shapes and indexing need (`t_started`, `len_lookback_buffer`, the end flags,
the spaces); ids, infos, custom data and times are host data outside the pytree, so one compile
serves every episode of the same shapes. `jax.jit`, `jax.tree_util.tree_map` and
`jax.device_put` accept an `Episode` and return it without host data (`has_host_data` False;
`with_host_data(original)` puts it back, `to_numpy()` keeps it).

Example:
    >>> import numpy as np
    >>> ep = Episode(observations=np.arange(4.0), actions=np.arange(3), rewards=[0.0, 1.0, 2.0],
    ...              len_lookback_buffer=1)
    >>> len(ep), float(ep.get_rewards(-1)), ep.get_rewards(slice(-4, None), fill=0.0).tolist()
    (2, 2.0, [0.0, 0.0, 1.0, 2.0])
"""

from __future__ import annotations

import types
import uuid
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.episode.access import EpisodeAccess, as_data, num_items
from rljax_offline.episode.rllib_state import episode_from_state, episode_state
from rljax_offline.errors import EpisodeError
from rljax_offline.tree_util import FrozenPytree, HostData, leading_dim

_ARRAY_FIELDS = ("observations", "actions", "rewards", "extra_model_outputs")
# Static metadata (hashable, part of the jit cache key): only what shapes and indexing need.
_STATIC_FIELDS = ("t_started", "len_lookback_buffer", "terminated", "truncated",
                  "observation_space_spec", "action_space_spec")
# Host-only data outside the pytree: one compile serves episodes with any ids / infos; JAX
# transforms (jit, tree_map, device_put) return episodes without it (see `with_host_data`).
_HOST_FIELDS = ("id_", "agent_id", "module_id", "multi_agent_episode_id", "_infos",
                "_custom_data", "start_time", "last_step_time")
_NO_HOST_DATA = ("this Episode came out of a JAX transform (jit, tree_map, device_put), which "
                 "does not carry host data (id_, infos, custom_data): restore it with "
                 "ep.with_host_data(original) or use ep.to_numpy()")


def _check_against_space(data: Any, spec: sp.SpaceSpec | None, what: str) -> None:
    if spec is None:
        return
    expected = sp.leaf_shapes(spec)
    exp_leaves, exp_def = jax.tree_util.tree_flatten(
        expected, is_leaf=lambda x: isinstance(x, tuple) and len(x) == 2
        and isinstance(x[1], np.dtype))
    got_leaves, got_def = jax.tree_util.tree_flatten(data)
    if len(exp_leaves) != len(got_leaves) or (
            jax.tree_util.tree_structure(sp.structure_of(spec)) != got_def):
        raise EpisodeError(f"{what} do not have the structure of their space {spec}: "
                           f"expected {exp_def}, got {got_def}")
    for (shape, _), leaf, (path, _) in zip(exp_leaves, got_leaves,
                                            jax.tree_util.tree_leaves_with_path(data)):
        if tuple(np.shape(leaf)[1:]) != tuple(shape):
            raise EpisodeError(
                f"{what}{jax.tree_util.keystr(path)} items have shape {np.shape(leaf)[1:]}, "
                f"but the space expects {tuple(shape)}")



@jax.tree_util.register_pytree_with_keys_class
class Episode(EpisodeAccess, FrozenPytree):
    """A finalized single-agent episode (chunk), immutable. See the module docstring.

    Checks lengths and item shapes here, not in jit. Data: item lists or step-first arrays.

    Args:
      observations: one more than actions (a pytree of arrays for Dict/Tuple spaces).
      actions: `len_lookback_buffer + len(episode)` actions.
      rewards: one reward per action.
      infos: one info dict per observation (default: empty dicts); host data, not jit data.
      extra_model_outputs: column name -> one value per action (e.g. `action_logp`).
      terminated: the episode ended in a terminal state (no bootstrapping past it).
      truncated: the episode was cut short (a time limit) and may be bootstrapped.
      id_: the episode id, shared by all its chunks (a new uuid by default).
      agent_id: the agent this episode belongs to in a multi-agent episode.
      module_id: the module (policy) that acted, RLlib's `module_id`.
      multi_agent_episode_id: the multi-agent episode this agent episode is part of.
      t_started: the global timestep of the first step after the lookback (default 0).
      len_lookback_buffer: how many leading actions/rewards are lookback (`"auto"`: all).
      observation_space: one observation's gymnasium space (or spec), checked and kept.
      action_space: one action's gymnasium space (or spec), checked and kept.
      custom_data: free-form host data carried along (RLlib's `custom_data`).
      start_time: wall-clock time the episode started, if known.
      last_step_time: wall-clock time of its last step, if known.

    Raises:
      EpisodeError: lengths that disagree, a lookback longer than the data, bad items.
    """

    __slots__ = _ARRAY_FIELDS + _STATIC_FIELDS + _HOST_FIELDS
    _array_fields, _static_fields = _ARRAY_FIELDS, _STATIC_FIELDS
    _host_fields = _HOST_FIELDS

    def __init__(
        self,
        observations: Any = None,
        actions: Any = None,
        rewards: Any = None,
        infos: list | None = None,
        extra_model_outputs: dict | None = None,
        terminated: bool = False,
        truncated: bool = False,
        id_: str | None = None,
        agent_id: Any = None,
        module_id: Any = None,
        multi_agent_episode_id: Any = None,
        t_started: int | None = None,
        len_lookback_buffer: int | str = 0,
        observation_space: Any = None,
        action_space: Any = None,
        custom_data: dict | None = None,
        start_time: float | None = None,
        last_step_time: float | None = None,
    ):
        obs_spec, act_spec = sp.to_spec(observation_space), sp.to_spec(action_space)
        try:
            obs = as_data(observations, obs_spec, "observations")
            act = as_data(actions, act_spec, "actions")
            rew = as_data(rewards, None, "rewards")
            emo = {str(k): as_data(v, None, f"extra_model_outputs[{k!r}]")
                   for k, v in (extra_model_outputs or {}).items()}
            n_obs = leading_dim(obs, "observations")
            n_act = leading_dim(act, "actions")
            n_rew = leading_dim(rew, "rewards")
            n_emo = {k: leading_dim(v, f"extra_model_outputs[{k!r}]") for k, v in emo.items()}
        except EpisodeError:
            raise
        except ValueError as e:
            raise EpisodeError(str(e)) from e
        if not (n_obs == n_act + 1 or n_obs == n_act == 0):
            raise EpisodeError(f"observations must be one longer than actions (the reset "
                               f"observation): got {n_obs} observations and {n_act} actions")
        if n_rew != n_act:
            raise EpisodeError(f"rewards must be as long as actions: got {n_rew} rewards and "
                               f"{n_act} actions")
        for k, n in n_emo.items():
            if n != n_act:
                raise EpisodeError(f"extra_model_outputs[{k!r}] must be as long as actions: "
                                   f"got {n} items and {n_act} actions")
        if len_lookback_buffer == "auto":
            len_lookback_buffer = n_rew
        if isinstance(len_lookback_buffer, bool) or not isinstance(
                len_lookback_buffer, (int, np.integer)) or len_lookback_buffer < 0:
            raise EpisodeError(f"len_lookback_buffer must be an int >= 0 or 'auto', got "
                               f"{len_lookback_buffer!r}")
        if len_lookback_buffer > n_act:
            raise EpisodeError(f"len_lookback_buffer={len_lookback_buffer} is longer than the "
                               f"data: only {n_act} actions and rewards were given")
        if infos is None:
            infos = [{} for _ in range(n_obs)]
        elif not isinstance(infos, (list, tuple)):
            raise EpisodeError(f"infos must be a list (one per observation), got "
                               f"{type(infos).__name__}")
        elif len(infos) != n_obs:
            raise EpisodeError(f"infos must be one per observation: got {len(infos)} infos "
                               f"and {n_obs} observations")
        _check_against_space(obs, obs_spec, "observations")
        _check_against_space(act, act_spec, "actions")
        for name, flag in (("terminated", terminated), ("truncated", truncated)):
            if not isinstance(flag, (bool, np.bool_)):
                raise EpisodeError(f"{name} must be a bool, got {type(flag).__name__}")
        if custom_data is not None and not isinstance(custom_data, dict):
            raise EpisodeError(f"custom_data must be a dict, got {type(custom_data).__name__}")

        values = dict(
            observations=obs, actions=act, rewards=rew, extra_model_outputs=emo,
            id_=uuid.uuid4().hex if id_ is None else id_, agent_id=agent_id,
            module_id=module_id, multi_agent_episode_id=multi_agent_episode_id,
            t_started=0 if t_started is None else int(t_started),
            len_lookback_buffer=int(len_lookback_buffer), terminated=bool(terminated),
            truncated=bool(truncated), observation_space_spec=obs_spec,
            action_space_spec=act_spec, _infos=HostData(tuple(infos)),
            _custom_data=HostData(dict(custom_data or {})), start_time=start_time,
            last_step_time=last_step_time)
        self._init_fields(values)

    # ------------------------------------------------------------------ pickling, repr

    def __getstate__(self):
        return {f: getattr(self, f) for f in self.__slots__}

    def __setstate__(self, state):
        self._init_fields(state)

    def __repr__(self) -> str:
        return (f"Episode(id_={self.id_!r}, len={len(self)}, lookback={self.len_lookback_buffer},"
                f" t_started={self.t_started}, terminated={self.terminated}, "
                f"truncated={self.truncated})")

    def _kwargs(self) -> dict:
        return dict(
            observations=self.observations, actions=self.actions, rewards=self.rewards,
            infos=self._host_infos(), extra_model_outputs=dict(self.extra_model_outputs),
            terminated=self.terminated, truncated=self.truncated, id_=self.id_,
            agent_id=self.agent_id, module_id=self.module_id,
            multi_agent_episode_id=self.multi_agent_episode_id, t_started=self.t_started,
            len_lookback_buffer=self.len_lookback_buffer,
            observation_space=self.observation_space_spec,
            action_space=self.action_space_spec, custom_data=self._host_custom_data(),
            start_time=self.start_time, last_step_time=self.last_step_time)

    @property
    def has_host_data(self) -> bool:
        """False for an episode returned by a JAX transform (no ids, infos, custom data)."""
        return self._infos is not None

    def _host_infos(self, indices=None, **kw):
        if not self.has_host_data:
            return None
        return list(self._infos.value) if indices is None else self.get_infos(indices, **kw)

    def _host_custom_data(self):
        return dict(self._custom_data.value) if self.has_host_data else None

    def _derived(self, **kwargs) -> Episode:
        """A new episode from constructor fields; host-less when this one is (inside jit)."""
        ep = Episode(**kwargs)
        if self.has_host_data:
            return ep
        leaves, treedef = jax.tree_util.tree_flatten(ep)
        return jax.tree_util.tree_unflatten(treedef, leaves)

    def with_host_data(self, other: Episode) -> Episode:
        """This episode's arrays with `other`'s host data (ids, infos, custom data, times),
        e.g. for an episode a jitted function returned, from the episode passed in."""
        if not other.has_host_data:
            raise EpisodeError("with_host_data: the other episode has no host data either")
        out = object.__new__(Episode)
        out._init_fields({f: getattr(self, f) for f in _ARRAY_FIELDS + _STATIC_FIELDS})
        out._init_fields({f: getattr(other, f) for f in _HOST_FIELDS})
        return out

    def replace(self, **changes) -> Episode:
        """A new episode with the given constructor fields changed (and re-validated)."""
        kwargs = self._kwargs()
        unknown = set(changes) - set(kwargs)
        if unknown:
            raise TypeError(f"replace() got unknown fields {sorted(unknown)}; "
                            f"allowed: {sorted(kwargs)}")
        kwargs.update(changes)
        return self._derived(**kwargs)

    def _with(self, **leaves) -> Episode:
        """Swaps array leaves of equal shape without re-validating (works on traced data)."""
        out = object.__new__(Episode)
        out._init_fields({f: leaves.get(f, getattr(self, f)) for f in _ARRAY_FIELDS})
        out._init_fields({f: getattr(self, f) for f in _STATIC_FIELDS + _HOST_FIELDS})
        return out

    # ------------------------------------------------------------------ properties

    def __len__(self) -> int:
        return num_items(self.actions) - self.len_lookback_buffer

    @property
    def _n_obs(self) -> int:
        return num_items(self.observations)

    @property
    def is_terminated(self) -> bool:
        return self.terminated

    @property
    def is_truncated(self) -> bool:
        return self.truncated

    @property
    def is_done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def is_reset(self) -> bool:
        return self._n_obs > 0

    @property
    def is_finalized(self) -> bool:
        return True

    @property
    def t(self) -> int:
        """Global timestep at the end of this chunk (RLlib's `t`)."""
        return self.t_started + len(self)

    env_t = t

    @property
    def observation_space(self):
        return None if self.observation_space_spec is None else sp.to_space(
            self.observation_space_spec)

    @property
    def action_space(self):
        return None if self.action_space_spec is None else sp.to_space(self.action_space_spec)

    @property
    def infos(self) -> tuple:
        if not self.has_host_data:
            raise EpisodeError(_NO_HOST_DATA)
        return self._infos.value

    @property
    def custom_data(self) -> types.MappingProxyType:
        if not self.has_host_data:
            raise EpisodeError(_NO_HOST_DATA)
        return types.MappingProxyType(self._custom_data.value)

    # ------------------------------------------------------------------ chunks

    def __getitem__(self, item):
        if isinstance(item, slice):
            return self.slice(item)
        raise TypeError("Episode[...] takes a slice (episode[a:b]); use the get_*() getters "
                        "for single items")

    def slice(self, slice_: slice, *, len_lookback_buffer: int | None = None) -> Episode:
        """The chunk `slice_` of this episode (RLlib's `SingleAgentEpisode.slice`).

        The chunk keeps up to `len_lookback_buffer` (default: this episode's) earlier steps as
        its lookback, as far as data exists; it is done only when it reaches this one's end.
        """
        if slice_.step not in (None, 1):
            raise NotImplementedError("episode slices must have step 1")
        n = len(self)

        def clip(b, default):
            if b is None:
                return default
            return max(n + b, 0) if b < 0 else min(b, n)

        start, stop = clip(slice_.start, 0), clip(slice_.stop, n)
        stop = max(stop, start)
        keep_done = stop == n
        want_lb = self.len_lookback_buffer if len_lookback_buffer is None else len_lookback_buffer
        new_lb = min(want_lb, self.len_lookback_buffer + start)
        kw = dict(neg_index_as_lookback=True)
        return self._derived(
            observations=self.get_observations(slice(start - new_lb, stop + 1), **kw),
            actions=self.get_actions(slice(start - new_lb, stop), **kw),
            rewards=self.get_rewards(slice(start - new_lb, stop), **kw),
            infos=self._host_infos(slice(start - new_lb, stop + 1), **kw),
            extra_model_outputs={k: self.get_extra_model_outputs(k, slice(start - new_lb, stop),
                                                                 **kw)
                                 for k in self.extra_model_outputs},
            terminated=self.terminated if keep_done else False,
            truncated=self.truncated if keep_done else False,
            id_=self.id_, agent_id=self.agent_id, module_id=self.module_id,
            multi_agent_episode_id=self.multi_agent_episode_id,
            t_started=self.t_started + start, len_lookback_buffer=new_lb,
            observation_space=self.observation_space_spec,
            action_space=self.action_space_spec, custom_data=self._host_custom_data(),
            start_time=self.start_time, last_step_time=self.last_step_time)

    def cut(self, len_lookback_buffer: int = 0) -> Episode:
        """The continuation chunk: length 0, same `id_`, starting at this chunk's `t`, with the
        last `len_lookback_buffer` steps (as far as they exist) as its lookback buffer."""
        if self.is_done:
            raise EpisodeError(f"cannot cut episode {self.id_!r}: it is done (terminated="
                               f"{self.terminated}, truncated={self.truncated})")
        if len_lookback_buffer < 0:
            raise EpisodeError(f"len_lookback_buffer must be >= 0, got {len_lookback_buffer}")
        k = len_lookback_buffer
        obs_idx = slice(-k - 1, None)
        rest_idx = slice(-k, None) if k > 0 else slice(None, 0)
        return self._derived(
            observations=self.get_observations(obs_idx),
            actions=self.get_actions(rest_idx),
            rewards=self.get_rewards(rest_idx),
            infos=self._host_infos(obs_idx),
            extra_model_outputs={k_: self.get_extra_model_outputs(k_, rest_idx)
                                 for k_ in self.extra_model_outputs},
            id_=self.id_, agent_id=self.agent_id, module_id=self.module_id,
            multi_agent_episode_id=self.multi_agent_episode_id, t_started=self.t,
            len_lookback_buffer="auto", observation_space=self.observation_space_spec,
            action_space=self.action_space_spec, custom_data=self._host_custom_data(),
            start_time=self.start_time, last_step_time=self.last_step_time)

    def concat_episode(self, other: Episode) -> Episode:
        """This chunk joined with `other`, the chunk that continues it (same `id_`, `other`
        starting at this chunk's `t` with this chunk's last observation)."""
        if other.id_ != self.id_:
            raise EpisodeError(f"cannot concat episode {other.id_!r} to episode {self.id_!r}: "
                               "ids differ")
        if self.is_done:
            raise EpisodeError(f"cannot concat to episode {self.id_!r}: it is already done")
        if other.t_started != self.t:
            raise EpisodeError(f"cannot concat: episode {self.id_!r} ends at t={self.t} but the "
                               f"next chunk starts at t_started={other.t_started}")
        last = jax.tree_util.tree_leaves(self.get_observations(-1))
        first = jax.tree_util.tree_leaves(other.get_observations(0))
        if not all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(last, first)):
            raise EpisodeError(f"cannot concat: the next chunk of {self.id_!r} does not start "
                               "with this chunk's last observation")

        def join(a, b):
            if isinstance(a, jax.Array) or isinstance(b, jax.Array):
                return jnp.concatenate([a, b], axis=0)
            return np.concatenate([np.asarray(a), np.asarray(b)], axis=0)

        obs = jax.tree_util.tree_map(lambda a, b: join(a[:-1], b), self.observations,
                                     other.get_observations())
        if set(self.extra_model_outputs) != set(other.extra_model_outputs):
            raise EpisodeError(f"cannot concat: extra_model_outputs keys differ "
                               f"({sorted(self.extra_model_outputs)} vs "
                               f"{sorted(other.extra_model_outputs)})")
        return self._derived(
            observations=obs,
            actions=jax.tree_util.tree_map(join, self.actions, other.get_actions()),
            rewards=join(self.rewards, other.get_rewards()),
            infos=(list(self._infos.value[:-1]) + list(other.get_infos())
                   if self.has_host_data and other.has_host_data else None),
            extra_model_outputs={k: jax.tree_util.tree_map(join, v,
                                                           other.get_extra_model_outputs(k))
                                 for k, v in self.extra_model_outputs.items()},
            terminated=other.terminated, truncated=other.truncated, id_=self.id_,
            agent_id=self.agent_id, module_id=self.module_id,
            multi_agent_episode_id=self.multi_agent_episode_id, t_started=self.t_started,
            len_lookback_buffer=self.len_lookback_buffer,
            observation_space=self.observation_space_spec or other.observation_space_spec,
            action_space=self.action_space_spec or other.action_space_spec,
            custom_data=({**self._custom_data.value, **other._custom_data.value}
                         if self.has_host_data and other.has_host_data else None),
            start_time=self.start_time, last_step_time=other.last_step_time)

    def to_numpy(self) -> Episode:
        """This episode with every array leaf on the host as numpy (host data kept)."""
        out = jax.tree_util.tree_map(np.asarray, self)
        return out.with_host_data(self) if self.has_host_data else out

    # ------------------------------------------------------------------ RLlib state dicts

    def get_state(self, finalized: bool = True) -> dict:
        """RLlib's `SingleAgentEpisode.get_state()` dict (see `episode.rllib_state`)."""
        return episode_state(self, finalized)

    @classmethod
    def from_state(cls, state: dict) -> Episode:
        """Builds an episode from RLlib's state dict (see `rljax_offline.episode.rllib_state`)."""
        return episode_from_state(state, cls)
