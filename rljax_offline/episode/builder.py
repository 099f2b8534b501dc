"""`EpisodeBuilder`: the non-finalized episode that env runners fill step by step.

Appending is O(1) (plain Python lists, no validation per step) because it runs once per env
step; `finalize()` stacks the lists once into an immutable `Episode`, where every check runs.
The getters follow the same index rules as `Episode` (env-to-module connectors read the data
collected so far); lists and slices come back stacked as arrays.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import jax
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.episode import lookback as lb
from rljax_offline.episode.episode import Episode, EpisodeError
from rljax_offline.tree_util import stack_items


class EpisodeBuilder:
    """Collects one episode (chunk) while an environment steps; see the module docstring.

    Start empty and call `add_env_reset` then `add_env_step`, or pass data already collected
    (e.g. the lookback a continuation chunk starts with). Nothing is checked per step; the
    checks run once in `finalize()`.

    Args:
      id_: the episode id (a new uuid by default).
      agent_id: the agent id, for an agent's episode in a multi-agent env.
      module_id: the module (policy) that acts.
      observation_space: one observation's gymnasium space, passed on to the `Episode`.
      action_space: one action's gymnasium space, passed on to the `Episode`.
      t_started: the global timestep this chunk starts at.
      len_lookback_buffer: how many of the given `actions` (and observations) are lookback.
      observations: observations collected so far (lookback first).
      actions: actions collected so far.
      rewards: rewards collected so far, one per action.
      infos: one info dict per observation (default: empty dicts).
      extra_model_outputs: column name -> list of values, one per action.

    Raises:
      EpisodeError: `len_lookback_buffer` longer than the actions given.
    """

    __slots__ = ("id_", "agent_id", "module_id", "observation_space", "action_space",
                 "t_started", "len_lookback_buffer", "_obs", "_act", "_rew", "_infos", "_emo",
                 "terminated", "truncated", "custom_data", "start_time", "last_step_time")

    def __init__(self, *, id_: str | None = None, agent_id: Any = None, module_id: Any = None,
                 observation_space: Any = None, action_space: Any = None, t_started: int = 0,
                 len_lookback_buffer: int = 0, observations: list | None = None,
                 actions: list | None = None, rewards: list | None = None,
                 infos: list | None = None, extra_model_outputs: dict | None = None):
        self.id_ = uuid.uuid4().hex if id_ is None else id_
        self.agent_id, self.module_id = agent_id, module_id
        self.observation_space, self.action_space = observation_space, action_space
        self.t_started = int(t_started)
        self._obs = list(observations or [])
        self._act = list(actions or [])
        self._rew = list(rewards or [])
        self._infos = list(infos) if infos is not None else [{} for _ in self._obs]
        self._emo = {k: list(v) for k, v in (extra_model_outputs or {}).items()}
        if len_lookback_buffer > len(self._act):
            raise EpisodeError(f"len_lookback_buffer={len_lookback_buffer} is longer than the "
                               f"{len(self._act)} actions given")
        self.len_lookback_buffer = int(len_lookback_buffer)
        self.terminated = self.truncated = False
        self.custom_data: dict = {}
        self.start_time = self.last_step_time = None

    # ------------------------------------------------------------------ appending

    def add_env_reset(self, observation: Any, infos: dict | None = None) -> None:
        """Records the reset observation; must come first, once."""
        if self._obs:
            raise EpisodeError(f"episode {self.id_!r} was already reset")
        self._obs.append(observation)
        self._infos.append({} if infos is None else infos)
        self.start_time = self.last_step_time = time.perf_counter()

    def add_env_step(self, observation: Any, action: Any, reward: Any, infos: dict | None = None,
                     *, terminated: bool = False, truncated: bool = False,
                     extra_model_outputs: dict | None = None) -> None:
        """Records one env step: the action taken, its reward and the next observation."""
        if self.terminated or self.truncated:
            raise EpisodeError(f"episode {self.id_!r} is done; cannot add a step")
        if not self._obs:
            raise EpisodeError(f"episode {self.id_!r} has no reset observation: call "
                               "add_env_reset() first")
        self._obs.append(observation)
        self._act.append(action)
        self._rew.append(reward)
        self._infos.append({} if infos is None else infos)
        if extra_model_outputs:
            for k, v in extra_model_outputs.items():
                buf = self._emo.get(k)
                if buf is None:
                    buf = self._emo[k] = []
                buf.append(v)
        self.terminated, self.truncated = bool(terminated), bool(truncated)

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return len(self._act) - self.len_lookback_buffer

    @property
    def is_done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def is_reset(self) -> bool:
        return bool(self._obs)

    @property
    def t(self) -> int:
        return self.t_started + len(self)

    env_t = t

    def _get(self, items: list, indices, neg_index_as_lookback, fill, what, space=None):
        p = lb.plan(indices, len(items), self.len_lookback_buffer,
                    neg_index_as_lookback=neg_index_as_lookback, fill=fill, what=what)
        fill_item = None
        if fill is not None:
            if items:
                fill_item = jax.tree_util.tree_map(
                    lambda x: np.full(np.shape(x), fill, np.asarray(x).dtype), items[0])
            elif space is not None:
                fill_item = jax.tree_util.tree_map(lambda x: x[0], sp.empty_data(
                    sp.to_spec(space), 1))
                fill_item = jax.tree_util.tree_map(lambda x: np.full_like(x, fill), fill_item)
            else:
                fill_item = fill
        out = lb.take_list(items, p, fill, fill_item)
        if p.single:
            return out[0]
        if not out:
            return np.zeros((0,))
        return stack_items(out, what)

    def get_observations(self, indices=None, *, neg_index_as_lookback=False, fill=None):
        return self._get(self._obs, indices, neg_index_as_lookback, fill, "observations",
                         self.observation_space)

    def get_actions(self, indices=None, *, neg_index_as_lookback=False, fill=None):
        return self._get(self._act, indices, neg_index_as_lookback, fill, "actions",
                         self.action_space)

    def get_rewards(self, indices=None, *, neg_index_as_lookback=False, fill=None):
        return self._get(self._rew, indices, neg_index_as_lookback, fill, "rewards")

    def get_infos(self, indices=None, *, neg_index_as_lookback=False, fill=None):
        p = lb.plan(indices, len(self._infos), self.len_lookback_buffer,
                    neg_index_as_lookback=neg_index_as_lookback, fill=fill, what="infos")
        out = lb.take_list(self._infos, p, fill, fill)
        return out[0] if p.single else out

    def get_extra_model_outputs(self, key: str, indices=None, *, neg_index_as_lookback=False,
                                fill=None):
        if key not in self._emo:
            raise KeyError(f"no extra model output {key!r}; have {sorted(self._emo)}")
        return self._get(self._emo[key], indices, neg_index_as_lookback, fill,
                         f"extra_model_outputs[{key!r}]")

    def get_return(self) -> float:
        return float(sum(self._rew[self.len_lookback_buffer:]))

    # ------------------------------------------------------------------ chunks, finalize

    def cut(self, len_lookback_buffer: int = 0) -> EpisodeBuilder:
        """A new builder continuing this episode, its last steps kept as lookback."""
        if self.is_done:
            raise EpisodeError(f"cannot cut episode {self.id_!r}: it is done")
        k = max(0, min(int(len_lookback_buffer), len(self._act)))
        new = EpisodeBuilder(
            id_=self.id_, agent_id=self.agent_id, module_id=self.module_id,
            observation_space=self.observation_space, action_space=self.action_space,
            t_started=self.t, len_lookback_buffer=k, observations=self._obs[-k - 1:],
            actions=self._act[len(self._act) - k:], rewards=self._rew[len(self._rew) - k:],
            infos=self._infos[-k - 1:],
            extra_model_outputs={key: v[len(v) - k:] for key, v in self._emo.items()})
        new.custom_data = dict(self.custom_data)
        new.start_time = new.last_step_time = self.last_step_time
        return new

    def lookback_window(self, k: int, *, extra_model_outputs: bool = True) -> Episode:
        """The last `k` steps (as far as they exist) as the lookback of a length-0 `Episode`.

        What an env-to-module pipeline needs to act now: `EpisodeBatch.from_episodes` of these
        windows with `max_len=0, len_lookback_buffer=k` has the same shape at every step, so
        the jitted pipeline compiles once. Works on done episodes too (unlike `cut`).
        `extra_model_outputs=False` leaves them out (fresh and older episodes then batch
        together).
        """
        k = max(0, min(int(k), len(self._act)))
        return Episode(
            observations=self._obs[-k - 1:], actions=self._act[len(self._act) - k:],
            rewards=self._rew[len(self._rew) - k:], infos=self._infos[-k - 1:],
            extra_model_outputs={key: v[len(v) - k:] for key, v in self._emo.items()}
            if extra_model_outputs else None,
            id_=self.id_, agent_id=self.agent_id, module_id=self.module_id, t_started=self.t,
            len_lookback_buffer=k, observation_space=self.observation_space,
            action_space=self.action_space)

    def finalize(self) -> Episode:
        """Stacks everything collected into an immutable `Episode` (all checks run here)."""
        for k, v in self._emo.items():
            if len(v) != len(self._act):
                raise EpisodeError(f"extra_model_outputs[{k!r}] was given at {len(v)} of "
                                   f"{len(self._act)} steps; give every key at every step")
        self.last_step_time = time.perf_counter() if self._obs else None
        return Episode(
            observations=self._obs, actions=self._act, rewards=self._rew, infos=self._infos,
            extra_model_outputs=self._emo, terminated=self.terminated,
            truncated=self.truncated, id_=self.id_, agent_id=self.agent_id,
            module_id=self.module_id, t_started=self.t_started,
            len_lookback_buffer=self.len_lookback_buffer,
            observation_space=self.observation_space, action_space=self.action_space,
            custom_data=self.custom_data, start_time=self.start_time,
            last_step_time=self.last_step_time)
