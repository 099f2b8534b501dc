"""Benchmark: an Atari-sized data set (84x84x4 uint8 frames) streamed from Parquet through BC
with the CNN policy BC builds for images by default (RLlib's 84x84 filters), with bounded
memory; the frames stay uint8 until the device.

Prints samples/s, MB/s of observations, seconds per 1024-sample iteration and the peak RSS.
RLlib's about 170 s for one BC iteration on Pong data (ray-project/ray#47247) is printed
beside them labelled as quoted (another machine, other data, not run here) and is in no ratio. The
data set is generated once (`--gb`, default 5) from a pool of random frames and reused; the
stream holds a few episodes and `prefetch_batches` global batches, so the peak RSS does not
grow with the data set (compare `--gb 0.2` with `--gb 1`).

    python benchmarks/scale.py [--gb 5] [--iterations 20] [--batch-size 1024]
"""

import argparse
import json
import os
import resource
import sys
import tempfile
import time

import gymnasium as gym
import jax
import numpy as np

from rljax_offline import BCConfig
from rljax_offline.data.writer import write_episodes
from rljax_offline.episode.builder import EpisodeBuilder

# Quoted, not measured: RLlib's seconds per BC iteration on Pong data on the issue author's
# machine. Printed for context only; no ratio is taken against it.
RLLIB_QUOTED = {"s_per_iteration": 170.0, "source": "ray-project/ray#47247 (Pong data, another "
                "machine; quoted, not measured by this command)"}
OBS_SHAPE, NUM_ACTIONS, EPISODE_LEN = (84, 84, 4), 6, 64
FRAME_BYTES = int(np.prod(OBS_SHAPE))


class AtariShapedEnv(gym.Env):
    """The spaces of an Atari env (frames stacked 4, 6 actions); never stepped here."""

    observation_space = gym.spaces.Box(0, 255, OBS_SHAPE, np.uint8)
    action_space = gym.spaces.Discrete(NUM_ACTIONS)

    def __init__(self, config=None):
        pass

    def reset(self, *, seed=None, options=None):
        return np.zeros(OBS_SHAPE, np.uint8), {}

    def step(self, action):
        return np.zeros(OBS_SHAPE, np.uint8), 0.0, True, False, {}


def generate(path: str, gb: float, episodes_per_file: int = 16) -> tuple[int, int]:
    """Writes `gb` GB of observations (once; reused when present). Returns (episodes,
    steps)."""
    steps_per_episode_bytes = (EPISODE_LEN + 1) * FRAME_BYTES
    num_episodes = max(int(gb * 1e9 / steps_per_episode_bytes), 2)
    marker = os.path.join(path, "_COMPLETE")
    if not os.path.exists(marker):
        pool = np.random.default_rng(0).integers(0, 256, (256, *OBS_SHAPE), np.uint8)
        rng = np.random.default_rng(1)

        def episode():
            b = EpisodeBuilder(observation_space=AtariShapedEnv.observation_space)
            idx = rng.integers(0, len(pool), EPISODE_LEN + 1)
            b.add_env_reset(pool[idx[0]])
            for t in range(EPISODE_LEN):
                b.add_env_step(pool[idx[t + 1]], int(rng.integers(NUM_ACTIONS)), 0.0,
                               terminated=t == EPISODE_LEN - 1)
            return b.finalize()

        for start in range(0, num_episodes, episodes_per_file):  # one file at a time
            n = min(episodes_per_file, num_episodes - start)
            write_episodes((episode() for _ in range(n)), os.path.join(path, f"part{start:07d}"))
        open(marker, "w").close()
    return num_episodes, num_episodes * EPISODE_LEN


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=5.0)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--data", default=None, help="where the data set lives (default: tmp)")
    args = ap.parse_args(argv)
    path = args.data or os.path.join(tempfile.gettempdir(), "rljax_offline_bench",
                                     f"atari_{args.gb:g}gb")
    t0 = time.perf_counter()
    episodes, steps = generate(path, args.gb)
    gen_s = time.perf_counter() - t0
    rss_after_generate = peak_rss_mb()
    algo = (BCConfig().environment(AtariShapedEnv)
            .offline_data(input_=path, materialize_data=False, materialize_mapped_data=False,
                          input_read_batch_size=4, shuffle_buffer_size=8, prefetch_batches=2)
            .training(lr=1e-4, train_batch_size_per_learner=args.batch_size,
                      num_updates_per_iteration=1)
            .evaluation(evaluation_interval=0).build())
    algo.train()  # the first iteration compiles
    jax.block_until_ready(algo.state.params)
    rss_after_first = peak_rss_mb()
    t0 = time.perf_counter()
    trained = 0
    for _ in range(args.iterations):
        r = algo.train()
        trained += int(r["learners"]["default_policy"]["num_module_steps_trained"])
    jax.block_until_ready(algo.state.params)
    dt = time.perf_counter() - t0
    algo.stop()
    samples = args.iterations * args.batch_size
    per_1024 = dt / args.iterations * 1024 / args.batch_size
    print(json.dumps({
        "data_gb": round(episodes * (EPISODE_LEN + 1) * FRAME_BYTES / 1e9, 2),
        "episodes": episodes, "timesteps": steps, "generate_s": round(gen_s, 1),
        "device": jax.devices()[0].platform, "num_devices": len(algo.devices),
        "iterations_timed": args.iterations, "batch_size": args.batch_size,
        "samples_trained": trained, "samples_per_s": round(samples / dt, 1),
        "obs_mb_per_s": round(samples * FRAME_BYTES / dt / 1e6, 1),
        "s_per_1024_sample_iteration": round(per_1024, 3),
        "rllib_quoted": RLLIB_QUOTED,
        "policy_loss": float(r["learners"]["default_policy"]["policy_loss"]),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "peak_rss_mb_after_first_iteration": round(rss_after_first, 1),
        "peak_rss_mb_after_generating": round(rss_after_generate, 1)}))


if __name__ == "__main__":
    sys.exit(main())
