"""Benchmark: per-step acting overhead with 8 envs (env stepping excluded: observations are
replayed from an array), for an MLP policy on CartPole-sized observations:

* bare: the jitted policy call (`policy.apply` + argmax), observations in, actions out;
* actor: what `EnvRunner` runs per step with an `ActorPolicy` (`runners/actor.py`):
  `observe` the last step, `select` the next actions (one donated jitted call), the actions
  and the recorded outputs (`action_logp`, `action_dist_inputs`) back on the host;
* actor_and_recording: the same plus appending each env's step to its `EpisodeBuilder`;
with the default env-to-module pipeline and with frame stacking (4). Aim: actor at most 2x
bare, in the same process.

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
from rljax_offline.runners.actor import ActorPolicy

N, STEPS, REPEATS = 8, 500, 3
OBS = gym.spaces.Box(-5, 5, (4,), np.float32)
ACT = gym.spaces.Discrete(2)
SPACES = Spaces.of(OBS, ACT)


def per_step_us(fn, steps=STEPS):
    """Best of `REPEATS` runs of `steps` calls (after one compiling call): the machine is
    shared, so the least disturbed run is the figure."""
    fn(0)
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for t in range(steps):
            fn(t)
        best = min(best, time.perf_counter() - t0)
    return best / steps * 1e6


def measure(pieces, obs, rng):
    """Per-step microseconds of bare, actor and actor with recording, for one pipeline."""
    rewards = np.ones(N, np.float32)
    fresh = np.zeros(N, bool)
    e2m = default_env_to_module(SPACES, *pieces)
    policy = make_policy(e2m.out_spaces(SPACES).observation, ACT, (64, 64))
    params = policy.init(jax.random.PRNGKey(0))
    bare_fn = jax.jit(lambda p, o: jnp.argmax(policy.apply(p, o), -1))
    width = e2m.out_spaces(SPACES).observation.shape[0]
    bare_obs = rng.normal(size=(STEPS + 1, N, width)).astype(np.float32)
    bare = per_step_us(lambda t: np.asarray(bare_fn(params, bare_obs[t])))

    acting = ActorPolicy(policy, params, SPACES, e2m, None, default_module_to_env(SPACES))
    acting.reset(obs[0], 0)
    acting.select()

    def actor_step(t):  # observe step t, select step t + 1's actions: one device call
        acting.observe(rewards, obs[t + 1], fresh)
        return acting.select()

    actor_us = per_step_us(actor_step)
    builders = [EpisodeBuilder(observation_space=OBS, action_space=ACT) for _ in range(N)]
    for i, b in enumerate(builders):
        b.add_env_reset(obs[0, i])

    def recording_step(t):  # what EnvRunner adds: one row per env into its builder
        actions, extras = actor_step(t)
        for i, b in enumerate(builders):
            b.add_env_step(obs[t + 1, i], actions[i], 1.0,
                           extra_model_outputs={k: v[i] for k, v in extras.items()})

    recording_us = per_step_us(recording_step)
    return {"bare_us": round(bare, 1), "actor_us": round(actor_us, 1),
            "actor_and_recording_us": round(recording_us, 1),
            "actor_over_bare": round(actor_us / bare, 2),
            "actor_and_recording_over_bare": round(recording_us / bare, 2)}


def main():
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(STEPS + 1, N, 4)).astype(np.float32)
    out = {label: measure(pieces, obs, rng)
           for label, pieces in (("default", []), ("frame_stack_4", [frame_stack(4)]))}
    print(json.dumps({"num_envs": N, **out}))


if __name__ == "__main__":
    main()
