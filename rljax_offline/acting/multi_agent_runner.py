"""`MultiAgentEnvRunner`: steps multi-agent envs with one policy per module and produces
`MultiAgentEpisode`s (and, with `record`, the multi-agent Parquet format).

Envs: PettingZoo parallel envs (`reset(seed=) -> (obs, infos)`, `step(actions) -> (obs,
rewards, terminations, truncations, infos)`, per-agent spaces; an AEC env goes through
`pettingzoo.utils.conversions.aec_to_parallel` first) and RLlib-style `MultiAgentEnv`s
(the same dicts with `"__all__"` flags). `num_envs` copies are stepped together: every step,
each module's policy is called once with the observations of all agents mapped to it across
the copies (one jitted forward per module per step). Agents that join late, act at their own
pace (an action hangs until the agent is observed again) or leave early are recorded with
RLlib's semantics by `MultiAgentEpisodeBuilder`; the env's `state()`, when it has one, is
kept per env step as the episode's global state.

A policy is a callable `(obs [N, ...], key) -> actions [N]` or `-> (actions, extra)` with
`extra` a dict of `[N]` arrays (`action_logp`, `action_dist_inputs`, ...), recorded as
extra model outputs. `random_policy(space)` samples uniformly and records `action_logp`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline.episode.multi_agent import MultiAgentEpisode
from rljax_offline.episode.multi_agent_builder import MultiAgentEpisodeBuilder


def random_policy(space: gym.spaces.Space) -> Callable:
    """Uniform random actions with their `action_logp` (Discrete or bounded Box), jitted.

    Args:
      space: the agent's action space.

    Returns:
      A policy `(obs, rng) -> (actions, {"action_logp": ...})`.
    """
    if isinstance(space, gym.spaces.Discrete):
        n = int(space.n)

        @jax.jit
        def act(obs, key):
            a = jax.random.randint(key, (obs.shape[0],), 0, n) + int(space.start)
            return a, {"action_logp": jnp.full(obs.shape[0], -np.log(n), jnp.float32)}
        return act
    if isinstance(space, gym.spaces.Box) and space.is_bounded():
        low, high = np.asarray(space.low, np.float32), np.asarray(space.high, np.float32)
        logp = -float(np.sum(np.log(high - low)))

        @jax.jit
        def act_box(obs, key):
            u = jax.random.uniform(key, (obs.shape[0], *low.shape))
            return low + u * (high - low), {
                "action_logp": jnp.full(obs.shape[0], logp, jnp.float32)}
        return act_box
    raise ValueError(f"random_policy needs a Discrete or bounded Box space, got {space}")


def as_parallel(env):
    """A PettingZoo AEC env (turn-based: `agent_iter`/`last`) through PettingZoo's own
    `aec_to_parallel`; other envs as they are."""
    if hasattr(env, "agent_iter") and hasattr(env, "last"):
        from pettingzoo.utils.conversions import aec_to_parallel
        return aec_to_parallel(env)
    return env


def agent_spaces(env) -> tuple[list, dict, dict]:
    """A multi-agent env's agents (`possible_agents`, else `agents`) and their observation
    and action spaces, `{agent_id: space}` each.

    Args:
      env: a PettingZoo parallel env or an RLlib-style dict env.
    """
    agents = list(getattr(env, "possible_agents", None) or getattr(env, "agents", []))
    return (agents, {a: env.observation_space(a) for a in agents},
            {a: env.action_space(a) for a in agents})


def probe_agent_spaces(env_fn: Callable[[], Any]) -> tuple[list, dict, dict]:
    """`agent_spaces` of one env made by `env_fn` (an AEC env converted) and closed again.

    Args:
      env_fn: `() -> env`.
    """
    env = as_parallel(env_fn())
    try:
        return agent_spaces(env)
    finally:
        getattr(env, "close", lambda: None)()


class MultiAgentEnvRunner:
    """Runs one policy per module in `num_envs` copies of a multi-agent env.

    Args:
      env_fn: `() -> env` (a PettingZoo parallel env or an RLlib-style dict env).
      policies: `{module_id: policy}` (see the module docstring).
      agent_to_module_mapping_fn: `(agent_id, episode) -> module_id`, or a dict.
      num_envs: env copies stepped together.
      seed: env reset seeds (`seed + episode number`) and the policies' RNG.
      global_state: keep the env's `state()` per env step (when the env has one).
    """

    def __init__(self, env_fn: Callable[[], Any], policies: dict, *,
                 agent_to_module_mapping_fn: Callable | dict, num_envs: int = 1,
                 seed: int = 0, global_state: bool = True):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.envs = [as_parallel(env_fn()) for _ in range(num_envs)]
        self.policies = dict(policies)
        self.mapping = agent_to_module_mapping_fn
        _, self.obs_spaces, self.act_spaces = agent_spaces(self.envs[0])
        self.seed = seed
        self.global_state = global_state
        self._key = jax.random.PRNGKey(seed)
        self._keys: list = []
        self._episodes_started = 0

    def _module(self, agent_id) -> Any:
        m = self.mapping
        return m[agent_id] if isinstance(m, dict) else m(agent_id, None)

    def _new_episode(self, i: int):
        env = self.envs[i]
        obs, infos = env.reset(seed=self.seed + self._episodes_started)
        self._episodes_started += 1
        b = MultiAgentEpisodeBuilder(observation_space=self.obs_spaces,
                                     action_space=self.act_spaces,
                                     agent_to_module_mapping_fn=self.mapping)
        b.add_env_reset(observations=obs, infos=infos)
        if self.global_state and hasattr(env, "state"):
            b.custom_data["global_state"] = [np.asarray(env.state())]
        return b, set(obs)

    def _next_key(self):
        """Keys drawn 1024 at a time (a host-side `split` per step costs milliseconds)."""
        if not self._keys:
            self._key, sub = jax.random.split(self._key)
            self._keys = list(np.asarray(jax.random.split(sub, 1024)))[::-1]
        return self._keys.pop()

    def _act(self, to_act: list[tuple[int, Any, Any]]) -> dict:
        """One call per module: `{(env index, agent): (action, extra)}`."""
        by_module: dict = {}
        for i, a, obs in to_act:
            by_module.setdefault(self._module(a), []).append((i, a, obs))
        out = {}
        for mid, rows in by_module.items():
            obs = np.stack([np.asarray(o) for _, _, o in rows])
            res = self.policies[mid](obs, self._next_key())
            actions, extra = res if isinstance(res, tuple) else (res, {})
            actions, extra = jax.device_get((actions, extra))  # one transfer
            actions = np.asarray(actions)
            extra = {k: np.asarray(v) for k, v in extra.items()}
            for j, (i, a, _) in enumerate(rows):
                act = actions[j]
                space = self.act_spaces.get(a)
                if isinstance(space, gym.spaces.Discrete):
                    act = int(act)
                out[(i, a)] = (act, {k: v[j] for k, v in extra.items()})
        return out

    def episodes(self, num_episodes: int) -> Iterator[MultiAgentEpisode]:
        """Yields `num_episodes` finished episodes as they end."""
        state = [self._new_episode(i) for i in range(len(self.envs))]
        done = 0
        while done < num_episodes:
            to_act = [(i, a, b.agents[a].obs[-1]) for i, (b, last) in enumerate(state)
                      for a in sorted(last, key=str) if not b.agents[a].done]
            per_env: list = [({}, {}) for _ in state]
            for (k, a), (act, e) in self._act(to_act).items():
                per_env[k][0][a] = act
                if e:
                    per_env[k][1][a] = e
            for i, (b, _) in enumerate(state):
                actions, extra = per_env[i]
                obs, rew, terms, truncs, infos = self.envs[i].step(actions)
                b.add_env_step(obs, actions, dict(rew), infos, terminateds=dict(terms),
                               truncateds=dict(truncs), extra_model_outputs=extra)
                if "global_state" in b.custom_data:
                    b.custom_data["global_state"].append(np.asarray(self.envs[i].state()))
                if b.is_done or not getattr(self.envs[i], "agents", True):
                    if not b.is_done:  # PettingZoo: no agents left, no flags for the rest
                        b.is_truncated = True
                    if "global_state" in b.custom_data:
                        b.custom_data["global_state"] = np.stack(
                            b.custom_data["global_state"])
                    yield b.finalize()
                    done += 1
                    if done >= num_episodes:
                        return
                    state[i] = self._new_episode(i)
                else:
                    state[i] = (b, set(obs))

    def sample(self, num_episodes: int) -> list[MultiAgentEpisode]:
        return list(self.episodes(num_episodes))

    def close(self) -> None:
        """Closes the env copies."""
        for env in self.envs:
            getattr(env, "close", lambda: None)()

    def record(self, path: str, num_episodes: int, **writer_options) -> list[str]:
        """Records `num_episodes` episodes to the multi-agent Parquet format under `path`."""
        from rljax_offline.data.multi_agent_io import MultiAgentEpisodeWriter

        with MultiAgentEpisodeWriter(path, **writer_options) as w:
            for ep in self.episodes(num_episodes):
                w.write(ep)
        return w.close()
