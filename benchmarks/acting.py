"""Benchmark: per-step acting overhead with 8 envs (env stepping excluded: observations are
replayed from an array), for an MLP policy on CartPole-sized observations:

* bare: the jitted policy call (`policy.apply` + argmax), observations in, actions out;
* actor: the pure on-device actor (`runners/actor.py`), `observe_and_select` (one call);
* connector_policy: `ConnectorPolicy.act` on `EpisodeBuilder`s (today's `EnvRunner` path);
both with the default env-to-module pipeline and with frame stacking (4). Aim: actor at most
2x bare.

    python benchmarks/acting.py
"""

import json
import time

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline.connectors import (
    Spaces,
    default_env_to_module,
    default_module_to_env,
    frame_stack,
)
from rljax_offline.episode_builder import EpisodeBuilder
from rljax_offline.models.policy import make_policy
from rljax_offline.runners.acting import ConnectorPolicy
from rljax_offline.runners.actor import make_actor

N, STEPS = 8, 500
OBS = gym.spaces.Box(-5, 5, (4,), np.float32)
ACT = gym.spaces.Discrete(2)
SPACES = Spaces.of(OBS, ACT)


def per_step_us(fn, steps=STEPS):
    fn(0)  # compile
    t0 = time.perf_counter()
    for t in range(steps):
        fn(t)
    return (time.perf_counter() - t0) / steps * 1e6


def measure(pieces, obs, rng):
    """Per-step microseconds of the three ways to act, for one env-to-module pipeline."""
    rewards = np.ones(N, np.float32)
    dones = np.zeros(N, bool)
    e2m = default_env_to_module(SPACES, *pieces)
    policy = make_policy(e2m.out_spaces(SPACES).observation, ACT, (64, 64))
    params = policy.init(jax.random.PRNGKey(0))
    bare_fn = jax.jit(lambda p, o: jnp.argmax(policy.apply(p, o), -1))
    width = e2m.out_spaces(SPACES).observation.shape[0]
    bare_obs = rng.normal(size=(STEPS + 1, N, width)).astype(np.float32)
    bare = per_step_us(lambda t: np.asarray(bare_fn(params, bare_obs[t])))

    actor = make_actor(policy, SPACES, e2m, default_module_to_env(SPACES))
    key = jax.random.PRNGKey(0)
    first, extras, s = actor.select_action(params, actor.init(obs[0]), key)
    state = {"s": s, "extras": extras}

    def actor_step(t):  # observe step t, select step t + 1's actions: one device call
        actions, state["extras"], state["s"] = actor.observe_and_select(
            params, state["s"], state["extras"], rewards, obs[t + 1], dones, key)
        return np.asarray(actions)

    actor_us = per_step_us(actor_step)
    cp = ConnectorPolicy(policy, params, SPACES, e2m, e2m.init(SPACES),
                         default_module_to_env(SPACES))
    builders = [EpisodeBuilder(observation_space=OBS, action_space=ACT) for _ in range(N)]
    for i, b in enumerate(builders):
        b.add_env_reset(obs[0, i])

    def cp_step(t):
        actions, _ = cp.act(builders, t)
        for i, b in enumerate(builders):
            b.add_env_step(obs[t + 1, i], int(actions[i]), 1.0)
        return actions

    cp_us = per_step_us(cp_step)
    return {"bare_us": round(bare, 1), "actor_us": round(actor_us, 1),
            "connector_policy_us": round(cp_us, 1),
            "actor_over_bare": round(actor_us / bare, 2),
            "connector_policy_over_bare": round(cp_us / bare, 2)}


def main():
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(STEPS + 1, N, 4)).astype(np.float32)
    out = {label: measure(pieces, obs, rng)
           for label, pieces in (("default", []), ("frame_stack_4", [frame_stack(4)]))}
    print(json.dumps({"num_envs": N, **out}))


if __name__ == "__main__":
    main()
