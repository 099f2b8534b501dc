"""Benchmark: per-step acting overhead with 8 envs (env stepping excluded: observations are
replayed from an array), for an MLP policy on CartPole-sized observations:

* bare: the jitted policy call (`policy.apply` + argmax), observations in, actions out;
* actor: what `EnvRunner` runs per step with an `ActorPolicy` (`acting/actor.py`):
  `observe` the last step, `select` the next actions (one jitted call), the actions
  and the recorded outputs (`action_logp`, `action_dist_inputs`) back on the host;
* actor_and_recording: the same plus appending each env's step to its `EpisodeBuilder`;
with the default env-to-module pipeline and with frame stacking (4), interleaved in one
process. Aim: actor at most 2x bare.

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
from rljax_offline.episode.builder import EpisodeBuilder
from rljax_offline.models.policy import make_policy
from rljax_offline.acting.actor import ActorPolicy

N, BLOCK, ROUNDS = 8, 100, 15
OBS = gym.spaces.Box(-5, 5, (4,), np.float32)
ACT = gym.spaces.Discrete(2)
SPACES = Spaces.of(OBS, ACT)


def per_step_us(fns: dict) -> dict:
    """Per-step microseconds of each `fn(t)`: blocks of `BLOCK` steps, the ways interleaved
    over `ROUNDS` rounds, the best block of each (after one compiling call). The machine is
    shared: interleaving puts every way under the same load, the best block is the least
    disturbed one."""
    for fn in fns.values():
        fn(0)
    best = dict.fromkeys(fns, float("inf"))
    for r in range(ROUNDS):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for t in range(r * BLOCK, (r + 1) * BLOCK):
                fn(t)
            best[name] = min(best[name], time.perf_counter() - t0)
    return {name: b / BLOCK * 1e6 for name, b in best.items()}


def measure(pieces, obs, rng):
    """Per-step microseconds of bare, actor and actor with recording, for one pipeline."""
    rewards = np.ones(N, np.float32)
    fresh = np.zeros(N, bool)
    e2m = default_env_to_module(SPACES, *pieces)
    policy = make_policy(e2m.out_spaces(SPACES).observation, ACT, (64, 64))
    params = policy.init(jax.random.PRNGKey(0))
    bare_fn = jax.jit(lambda p, o: jnp.argmax(policy.apply(p, o), -1))
    width = e2m.out_spaces(SPACES).observation.shape[0]
    bare_obs = rng.normal(size=(len(obs), N, width)).astype(np.float32)

    acting = ActorPolicy(policy, params, SPACES, e2m, None, default_module_to_env(SPACES))
    acting.reset(obs[0], 0)
    acting.select()

    def actor_step(t):  # observe step t, select step t + 1's actions: one device call
        acting.observe(rewards, obs[t + 1], fresh)
        return acting.select()

    builders = [EpisodeBuilder(observation_space=OBS, action_space=ACT) for _ in range(N)]
    for i, b in enumerate(builders):
        b.add_env_reset(obs[0, i])

    def recording_step(t):  # what EnvRunner adds: one row per env into its builder
        actions, extras = actor_step(t)
        for i, b in enumerate(builders):
            b.add_env_step(obs[t + 1, i], actions[i], 1.0,
                           extra_model_outputs={k: v[i] for k, v in extras.items()})

    us = per_step_us({"bare": lambda t: np.asarray(bare_fn(params, bare_obs[t])),
                      "actor": actor_step, "actor_and_recording": recording_step})
    return {**{f"{k}_us": round(v, 1) for k, v in us.items()},
            "actor_over_bare": round(us["actor"] / us["bare"], 2),
            "actor_and_recording_over_bare": round(us["actor_and_recording"] / us["bare"], 2)}


def main():
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(BLOCK * ROUNDS + 1, N, 4)).astype(np.float32)
    out = {label: measure(pieces, obs, rng)
           for label, pieces in (("default", []), ("frame_stack_4", [frame_stack(4)]))}
    print(json.dumps({"num_envs": N, **out}))


if __name__ == "__main__":
    main()
