"""Benchmark: reading a 500-episode CartPole data set (about 250k timesteps) into episodes.

Two layouts of the same episodes: RLlib's (one file per episode, per-step lists in each
buffer, as its recorder writes) and ours (100 episodes a file, one array per buffer). The
reference is the bare loop that RLlib's decoding costs: `pyarrow.parquet.read_table` +
`msgpack.unpackb(object_hook=msgpack_numpy.decode)`, run in the same command on each layout,
so each ratio compares readers on the same files (aim: >= 2x the bare loop on RLlib's layout).
What the layout alone buys is printed apart: our reader on our layout vs on RLlib's, and the
bare loop on our layout vs on RLlib's.

    python benchmarks/read_throughput.py
"""

import glob
import json
import os
import sys
import time

import msgpack
import msgpack_numpy
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(__file__))

from _common import CACHE, cartpole_recording  # noqa: E402

from rljax_offline.data import read_episodes, write_episodes  # noqa: E402


def rllib_layout(src: str) -> str:
    path = os.path.join(CACHE, "cartpole_500_rllib_layout")
    if not os.path.isdir(path):
        write_episodes(read_episodes(src), path, rllib_layout=True, output_max_rows_per_file=1,
                       compression="snappy")
    return path


def bare_loop(path):
    steps = 0
    for f in sorted(glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True)):
        for blob in pq.read_table(f).column("item").to_pylist():
            st = msgpack.unpackb(blob, object_hook=msgpack_numpy.decode)
            steps += st["t"] - st["t_started"]
    return steps


def ours(path):
    return sum(len(e) for e in read_episodes(path))


def best(fn, path, repeats=3):
    t = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        steps = fn(path)
        t.append(time.perf_counter() - t0)
    return steps, min(t)


def main():
    src = cartpole_recording(500, output_max_rows_per_file=100)
    rl = rllib_layout(src)
    steps, t_bare_rl = best(bare_loop, rl)
    steps_src, t_bare = best(bare_loop, src)
    assert steps_src == steps, (steps_src, steps)
    _, t_ours_rl = best(ours, rl)
    _, t_ours = best(ours, src)
    print(json.dumps({
        "timesteps": steps, "rllib_layout_files": len(os.listdir(rl)),
        "rllib_layout": {"bare_decoder_ts_per_s": round(steps / t_bare_rl),
                         "ours_ts_per_s": round(steps / t_ours_rl),
                         "ours_vs_bare": round(t_bare_rl / t_ours_rl, 2)},
        "our_layout": {"bare_decoder_ts_per_s": round(steps / t_bare),
                       "ours_ts_per_s": round(steps / t_ours),
                       "ours_vs_bare": round(t_bare / t_ours, 2)},
        "layout_alone": {"ours": round(t_ours_rl / t_ours, 2),
                         "bare_decoder": round(t_bare_rl / t_bare, 2)}}))


if __name__ == "__main__":
    main()
