"""Benchmark: stream a large episode data set through the shuffle buffer and report peak RSS
against the data set's size (aim: peak RSS under a quarter of the data set).

The data set is synthetic CartPole-shaped episodes with a large observation (default 64x64
float32 frames, so the files hold real bytes), written once with our streaming writer.
`--gb 2` builds the 2 GB run of the issue; the default (0.25 GB) runs in about a minute.

    python benchmarks/stream_memory.py [--gb 0.25] [--shuffle 32]
"""

import argparse
import json
import os
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

from _common import CACHE  # noqa: E402
from rljax_offline import Episode  # noqa: E402
from rljax_offline.data import EpisodeWriter, iter_episodes  # noqa: E402


def build(path: str, gb: float, frame: int) -> None:
    if os.path.isdir(path):
        return
    rng = np.random.default_rng(0)
    per_step = frame * frame * 4
    T = 200
    n_eps = int(gb * 2**30 / (per_step * (T + 1))) + 1
    with EpisodeWriter(path, output_max_rows_per_file=16, compression="none") as w:
        for _ in range(n_eps):
            obs = rng.random((T + 1, frame, frame), dtype=np.float32)
            w.write(Episode(observations=obs, actions=rng.integers(0, 2, T),
                            rewards=np.ones(T), terminated=True))


def dir_size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=0.25)
    ap.add_argument("--frame", type=int, default=64)
    ap.add_argument("--shuffle", type=int, default=32)
    ap.add_argument("--stream-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    path = os.path.join(CACHE, f"stream_{args.gb}gb_{args.frame}")
    if not args.stream_only:
        build(path, args.gb, args.frame)
        # Measure in a fresh process, so building the data set does not count.
        import subprocess

        subprocess.run([sys.executable, __file__, *sys.argv[1:], "--stream-only"], check=True)
        return
    size = dir_size(path)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    steps = episodes = 0
    for ep in iter_episodes(path, shuffle_buffer_size=args.shuffle, seed=0, prefetch=4):
        steps += len(ep)
        episodes += 1
    secs = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({
        "dataset_bytes": size, "episodes": episodes, "timesteps": steps,
        "shuffle_buffer_episodes": args.shuffle, "seconds": round(secs, 2),
        "throughput_MB_per_s": round(size / secs / 2**20, 1),
        "rss_before_stream_MB": round(rss_before / 2**20), "peak_rss_MB": round(peak / 2**20),
        "peak_rss_over_dataset": round(peak / size, 3),
        "streaming_rss_over_dataset": round((peak - rss_before) / size, 3)}))


if __name__ == "__main__":
    main()
