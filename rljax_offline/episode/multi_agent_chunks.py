"""Chunks of a `MultiAgentEpisode`: `cut` (the continuation chunk), `slice` (`episode[a:b]`)
and `concat_episode` (join a chunk and its continuation), each returning a new episode.

Everything is done on the env-step map: env step `j` of a chunk is entry `map_lookback + j`
of every agent's map, so a window of env steps is a window of entries for every agent, and the
agent steps inside it are the non-skip entries. Unlike RLlib 2.60 (which rebuilds the chunk
from per-env-step lists), `cut` keeps every hanging action, reward and model output and the
agents that have one, so `a.concat_episode(a.cut())` stepped on equals the uncut episode.
"""

from __future__ import annotations

import numpy as np

from rljax_offline.episode.multi_agent import SKIP, MultiAgentEpisode
from rljax_offline.errors import MultiAgentEpisodeError


def _steps(entries) -> list:
    return [e for e in entries if e != SKIP]


def align_extra_model_outputs(ep, other):
    """`ep` with empty model-output columns for the keys only `other` has, when `ep` has no
    actions at all (an agent that has not acted yet has no model outputs).

    Args:
      ep: the agent episode that may lack columns.
      other: an agent episode of the same module with the full columns.
    """
    missing = set(other.extra_model_outputs) - set(ep.extra_model_outputs)
    if not missing or len(ep.rewards) > 0:
        return ep
    emo = dict(ep.extra_model_outputs)
    for k in missing:
        emo[k] = np.asarray(other.extra_model_outputs[k])[:0]
    return ep.replace(extra_model_outputs=emo)


def cut_episode(ep: MultiAgentEpisode, len_lookback_buffer: int = 0) -> MultiAgentEpisode:
    """The continuation of `ep`: no env steps yet, the last `len_lookback_buffer` env steps
    (more where an agent's last observation lies further back) as lookback.

    Args:
      ep: the chunk to continue.
      len_lookback_buffer: env steps of lookback the continuation keeps.
    """
    if ep.is_done:
        raise MultiAgentEpisodeError(f"cannot cut multi-agent episode {ep.id_!r}: it is done")
    if len_lookback_buffer < 0:
        raise MultiAgentEpisodeError(f"len_lookback_buffer must be >= 0, got "
                                     f"{len_lookback_buffer}")
    alive = [a for a, e in ep.agent_episodes.items() if not e.is_done]
    window = int(len_lookback_buffer)
    for a in alive:
        entries = ep.env_t_to_agent_t[a]
        back = next((i for i in range(len(entries)) if entries[-1 - i] != SKIP), None)
        if back is not None:
            window = max(window, back)
    episodes, maps, lookbacks, t_started = {}, {}, {}, {}
    for a in alive:
        entries = ep.env_t_to_agent_t[a]
        w = min(window, len(entries) - 1)
        new_map = entries[len(entries) - w - 1:]
        e = ep.agent_episodes[a]
        k = min(max(len(_steps(new_map)) - 1, 0), len(e) + e.len_lookback_buffer)
        episodes[a] = e.cut(len_lookback_buffer=k)
        maps[a], lookbacks[a], t_started[a] = new_map, w, e.t
    return MultiAgentEpisode(
        id_=ep.id_, agent_episodes=episodes, env_t_to_agent_t=maps, map_lookback=lookbacks,
        agent_t_started=t_started, env_t_started=ep.env_t, env_t=ep.env_t,
        hanging_actions_end={a: v for a, v in ep.hanging_actions_end.items() if a in maps},
        hanging_extra_model_outputs_end={a: v for a, v in
                                         ep.hanging_extra_model_outputs_end.items()
                                         if a in maps},
        hanging_rewards_end={a: v for a, v in ep.hanging_rewards_end.items() if a in maps},
        # rewards of agents that have not joined yet still wait for their first observation
        hanging_rewards_begin={a: r for a, r in ep.hanging_rewards_begin.items()
                               if a not in ep.agent_episodes},
        agent_module_ids=dict(ep.agent_module_ids),
        observation_space=dict(ep.observation_space), action_space=dict(ep.action_space),
        custom_data=dict(ep.custom_data))


def concat_episodes(first: MultiAgentEpisode, other: MultiAgentEpisode) -> MultiAgentEpisode:
    """`first` followed by `other`, the chunk that continues it (same id, `other` starting at
    `first.env_t`).

    Args:
      first: the earlier chunk.
      other: the chunk that continues it.
    """
    if other.id_ != first.id_:
        raise MultiAgentEpisodeError(f"cannot concat episode {other.id_!r} to {first.id_!r}: "
                                     "ids differ")
    if first.is_done:
        raise MultiAgentEpisodeError(f"cannot concat to episode {first.id_!r}: it is done")
    if other.env_t_started != first.env_t:
        raise MultiAgentEpisodeError(f"cannot concat: episode {first.id_!r} ends at env step "
                                     f"{first.env_t}, the next chunk starts at "
                                     f"{other.env_t_started}")
    n_first, n_other = len(first), len(other)
    default_lb = max(list(first.map_lookback.values()) or [0])
    episodes, maps, lookbacks, t_started = {}, {}, {}, {}
    h_act, h_emo, h_end = {}, {}, {}
    # joined in `first`: its begin rewards; not joined there: `other` carries them on
    h_begin = {a: r for a, r in first.hanging_rewards_begin.items() if a in first.agent_episodes}
    for a in list(first.agent_episodes) + [a for a in other.agent_episodes
                                           if a not in first.agent_episodes]:
        mine, theirs = first.agent_episodes.get(a), other.agent_episodes.get(a)
        if mine is not None:
            head, lb = list(first.env_t_to_agent_t[a]), first.map_lookback[a]
            t_started[a] = first.agent_t_started[a]
        else:
            head, lb = [SKIP] * (default_lb + n_first + 1), default_lb
            t_started[a] = other.agent_t_started[a]
        if theirs is None or (mine is not None and mine.is_done):
            tail = [SKIP] * n_other
            episodes[a] = mine
            src = first
        else:
            o_map, o_lb = other.env_t_to_agent_t[a], other.map_lookback[a]
            tail = list(o_map[o_lb + 1:])
            episodes[a] = theirs if mine is None else align_extra_model_outputs(
                mine, theirs).concat_episode(align_extra_model_outputs(theirs, mine))
            src = other
            if theirs.is_done:
                h_begin.pop(a, None)  # the builder drops them when the agent is done
        maps[a], lookbacks[a] = head + tail, lb
        for d_out, d_in in ((h_act, src.hanging_actions_end),
                            (h_emo, src.hanging_extra_model_outputs_end),
                            (h_end, src.hanging_rewards_end)):
            if a in d_in:
                d_out[a] = d_in[a]
    for a, r in other.hanging_rewards_begin.items():
        if a not in first.agent_episodes:
            h_begin[a] = r
    return MultiAgentEpisode(
        id_=first.id_, agent_episodes=episodes, env_t_to_agent_t=maps, map_lookback=lookbacks,
        agent_t_started=t_started, env_t_started=first.env_t_started, env_t=other.env_t,
        is_terminated=other.is_terminated, is_truncated=other.is_truncated,
        hanging_actions_end=h_act, hanging_extra_model_outputs_end=h_emo,
        hanging_rewards_end=h_end, hanging_rewards_begin=h_begin,
        agent_module_ids={**first.agent_module_ids, **other.agent_module_ids},
        observation_space=dict(first.observation_space), action_space=dict(first.action_space),
        custom_data={**first.custom_data, **other.custom_data})


def _at(x):
    """A hanging value as the builder keeps it (Python int for a scalar integer)."""
    x = np.asarray(x)
    return int(x) if x.ndim == 0 and x.dtype.kind in "iu" else x


def slice_episode(ep: MultiAgentEpisode, slice_: slice,
                  len_lookback_buffer: int | None = None) -> MultiAgentEpisode:
    """Env steps `slice_` of `ep` with up to `len_lookback_buffer` earlier env steps as
    lookback (default: the episode's).

    Args:
      ep: the multi-agent episode.
      slice_: the env steps to keep.
      len_lookback_buffer: earlier env steps kept as lookback.
    """
    if slice_.step not in (None, 1):
        raise NotImplementedError("multi-agent episode slices must have step 1")
    n = len(ep)

    def clip(b, default):
        if b is None:
            return default
        return max(n + b, 0) if b < 0 else min(b, n)

    start, stop = clip(slice_.start, 0), clip(slice_.stop, n)
    stop = max(stop, start)
    ref_lb = max(list(ep.map_lookback.values()) or [0])
    want = ref_lb if len_lookback_buffer is None else int(len_lookback_buffer)
    lb_new = min(want, ref_lb + start)
    episodes, maps, lookbacks, t_started = {}, {}, {}, {}
    h_act, h_emo, h_rew = {}, {}, {}
    for a, e in ep.agent_episodes.items():
        entries, mlb = ep.env_t_to_agent_t[a], ep.map_lookback[a]
        lo = max(mlb + start - lb_new, 0)
        window = list(entries[lo:mlb + stop + 1])
        pad = (mlb + start - lb_new) - lo if mlb + start - lb_new < 0 else 0
        if pad < 0 or lo > mlb + start - lb_new:
            window = [SKIP] * (lo - (mlb + start - lb_new)) + window
        inside = _steps(window[lb_new:])
        if not inside:
            continue
        before = _steps(window[:lb_new])
        first_t, last_t = inside[0], inside[-1]
        rel = first_t - ep.agent_t_started[a]
        n_lb = min(len(before), rel + e.len_lookback_buffer)
        done_here = stop == n and last_t - ep.agent_t_started[a] == len(e)
        sub = e.slice(slice(rel, last_t - ep.agent_t_started[a]), len_lookback_buffer=n_lb)
        if not done_here and sub.is_done:
            sub = sub.replace(terminated=False, truncated=False)
        episodes[a], maps[a], lookbacks[a], t_started[a] = sub, window, lb_new, first_t
        k = last_t - ep.agent_t_started[a]  # the agent's action after its last observation
        if stop < n and window[-1] == SKIP and k < len(e):
            # it acted inside the slice and its next observation comes after it: that
            # action hangs here, with the reward the episode records for it
            h_act[a] = _at(e.get_actions(k))
            h_rew[a] = float(e.get_rewards(k))
            h_emo[a] = {key: _at(e.get_extra_model_outputs(key, k))
                        for key in e.extra_model_outputs}
        elif stop < n and window[-1] == SKIP and a in ep.hanging_actions_end:
            # the episode's own hanging action was taken inside the slice
            h_act[a] = ep.hanging_actions_end[a]
            h_rew[a] = ep.hanging_rewards_end.get(a, 0.0)
            if a in ep.hanging_extra_model_outputs_end:
                h_emo[a] = ep.hanging_extra_model_outputs_end[a]
    if stop == n:
        h_act = {a: v for a, v in ep.hanging_actions_end.items() if a in episodes}
        h_emo = {a: v for a, v in ep.hanging_extra_model_outputs_end.items() if a in episodes}
        h_rew = {a: v for a, v in ep.hanging_rewards_end.items() if a in episodes}
    return MultiAgentEpisode(
        id_=ep.id_, agent_episodes=episodes, env_t_to_agent_t=maps, map_lookback=lookbacks,
        agent_t_started=t_started, env_t_started=ep.env_t_started + start,
        env_t=ep.env_t_started + stop,
        is_terminated=stop == n and ep.is_terminated,
        is_truncated=stop == n and ep.is_truncated,
        hanging_actions_end=h_act, hanging_extra_model_outputs_end=h_emo,
        hanging_rewards_end=h_rew,
        hanging_rewards_begin={}, agent_module_ids=dict(ep.agent_module_ids),
        observation_space=dict(ep.observation_space), action_space=dict(ep.action_space),
        custom_data=dict(ep.custom_data))
