"""Benchmark: from the Parquet files of a 500-episode CartPole expert recording to an
evaluation return >= 450, timed in parts (load, compile, train, evaluate), with the updates
needed. RLlib 2.60 took 85.7 s (median) for the same on this machine kind; its guide quotes
about 98 s. The bare plain-JAX loop of shared/bench/bc_limit.py runs in the same process
(its data already in memory) as the reference for the training part.

    python benchmarks/bc_cartpole.py [--updates-per-iteration 100]
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import jax  # noqa: E402
from _common import cartpole_recording  # noqa: E402

from rljax_offline import BCConfig  # noqa: E402

RLLIB_SECONDS = 85.7


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--updates-per-iteration", type=int, default=100)
    ap.add_argument("--eval-episodes", type=int, default=5)
    ap.add_argument("--max-iterations", type=int, default=50)
    args = ap.parse_args()
    data = cartpole_recording(500, output_max_rows_per_file=100)

    t_start = time.perf_counter()
    algo = (BCConfig().environment("CartPole-v1").offline_data(input_=data)
            .training(lr=1e-3, train_batch_size_per_learner=1024,
                      num_updates_per_iteration=args.updates_per_iteration)
            .evaluation(evaluation_interval=1, evaluation_duration=args.eval_episodes)
            .build())
    t_build = time.perf_counter() - t_start
    t0 = time.perf_counter()
    algo.load_data()
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    scan = algo.dp.scan_on_device(args.updates_per_iteration)
    jax.block_until_ready(scan.lower(algo.state, algo._data).compile())
    t_compile = time.perf_counter() - t0
    algo._scan = scan
    ret, train_s, eval_s = 0.0, 0.0, 0.0
    for _ in range(args.max_iterations):
        r = algo.train()
        ev = r["evaluation"]["env_runners"]
        eval_s += ev["evaluation_time_s"]
        train_s += r["time_this_iter_s"] - ev["evaluation_time_s"]
        ret = ev["episode_return_mean"]
        if ret >= 450:
            break
    total = time.perf_counter() - t_start
    print(json.dumps({
        "device": jax.devices()[0].platform, "episodes": algo.num_episodes,
        "timesteps": algo.num_timesteps, "build_s": round(t_build, 2),
        "load_s": round(t_load, 2), "compile_s": round(t_compile, 2),
        "train_s": round(train_s, 2), "evaluate_s": round(eval_s, 2),
        "total_s": round(total, 2), "iterations": algo.iteration,
        "updates": algo.iteration * args.updates_per_iteration, "final_return": ret,
        "reached_450": ret >= 450, "speedup_vs_rllib_85.7s": round(RLLIB_SECONDS / total, 1)}))


if __name__ == "__main__":
    main()
