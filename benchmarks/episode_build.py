"""Benchmark: build and finalize 1,000 CartPole episodes through `EpisodeBuilder`.

The transitions are recorded once from CartPole-v1 with a scripted expert, then replayed
(a) into bare Python lists stacked with numpy at the end, the least any recorder can do,
and (b) through `EpisodeBuilder.add_env_reset/add_env_step/finalize`, in the same process.
Prints steps/s for both and the ratio (aim: the builder within 3x of the bare loop).

    python benchmarks/episode_build.py [--episodes 1000]
"""

import argparse
import json
import time

import gymnasium as gym
import numpy as np

from rljax_offline import EpisodeBuilder

W = np.array([0.0, 0.5, 1.0, 0.5])


def record(n_episodes: int):
    env = gym.make("CartPole-v1")
    episodes = []
    for s in range(n_episodes):
        obs, info = env.reset(seed=s)
        steps = []
        done = False
        while not done:
            a = int(W @ obs > 0)
            nxt, r, te, tr, info = env.step(a)
            steps.append((nxt, a, r, te, tr, info))
            obs, done = nxt, te or tr
        episodes.append((env.reset(seed=s)[0], steps))
    return episodes


def bare_loop(data):
    out = []
    for reset_obs, steps in data:
        obs, acts, rews, infos = [reset_obs], [], [], [{}]
        for nxt, a, r, _te, _tr, info in steps:
            obs.append(nxt)
            acts.append(a)
            rews.append(r)
            infos.append(info)
        te, tr = steps[-1][3], steps[-1][4]
        out.append((np.stack(obs), np.asarray(acts), np.asarray(rews), infos, te, tr))
    return out


def builder_loop(data):
    out = []
    for reset_obs, steps in data:
        b = EpisodeBuilder()
        b.add_env_reset(reset_obs)
        for nxt, a, r, te, tr, info in steps:
            b.add_env_step(nxt, a, r, info, terminated=te, truncated=tr)
        out.append(b.finalize())
    return out


def best_of(fn, data, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(data)
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    data = record(args.episodes)
    steps = sum(len(s) for _, s in data)
    t_bare = best_of(bare_loop, data, args.repeats)
    t_builder = best_of(builder_loop, data, args.repeats)
    eps = builder_loop(data[:3])
    assert all(e.is_done for e in eps)
    print(json.dumps({
        "episodes": args.episodes, "timesteps": steps,
        "bare_list_steps_per_s": round(steps / t_bare),
        "episode_builder_steps_per_s": round(steps / t_builder),
        "builder_time_over_bare_time": round(t_builder / t_bare, 2),
    }))


if __name__ == "__main__":
    main()
