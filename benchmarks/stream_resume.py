"""Benchmark: how long a resumed stream takes to reach its position, skipping without decoding
(`iter_episodes(start=k)` on episode-rows files) vs decoding the epoch's first k episodes
again and dropping them (what other formats do), through a shuffle buffer.

The data set: synthetic episodes with 32x32 float32 observations, 16 episodes a file.

    python benchmarks/stream_resume.py [--episodes 2000] [--at 0.9] [--shuffle 64]
"""

import argparse
import itertools
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

from _common import CACHE  # noqa: E402
from rljax_offline import Episode  # noqa: E402
from rljax_offline.data import EpisodeWriter, iter_episodes  # noqa: E402


def build(path: str, n: int) -> None:
    if os.path.isdir(path):
        return
    rng = np.random.default_rng(0)
    with EpisodeWriter(path, output_max_rows_per_file=16, row_group_size=4) as w:
        for i in range(n):
            T = int(rng.integers(50, 150))
            w.write(Episode(observations=rng.random((T + 1, 32, 32), dtype=np.float32),
                            actions=rng.integers(0, 2, T), rewards=np.ones(T),
                            terminated=True, id_=f"e{i}"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--at", type=float, default=0.9, help="resume position, share of an epoch")
    ap.add_argument("--shuffle", type=int, default=64)
    args = ap.parse_args()
    path = os.path.join(CACHE, f"stream_resume_{args.episodes}")
    build(path, args.episodes)
    k = int(args.at * args.episodes)
    opts = dict(shuffle_buffer_size=args.shuffle, seed=3)

    t0 = time.perf_counter()
    fast = next(iter_episodes(path, start=k, **opts))
    skip_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    slow = next(itertools.islice(iter_episodes(path, **opts), k, None))
    replay_s = time.perf_counter() - t0
    assert fast.id_ == slow.id_
    print(json.dumps({"episodes": args.episodes, "resume_at": k, "shuffle": args.shuffle,
                      "skip_without_decoding_s": round(skip_s, 3),
                      "decode_and_drop_s": round(replay_s, 3),
                      "speedup": round(replay_s / skip_s, 1)}))


if __name__ == "__main__":
    main()
