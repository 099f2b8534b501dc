"""Benchmark: N seeds in one compiled program (`config.debugging(seeds=[...])`) against the same N
runs one after another (`Algorithm` per seed), IQL and TD3+BC at d3rlpy's settings ([256, 256]
networks, batch 256) on Pendulum data (the scripted expert mixed with noise, recorded here).

`--hidden` and `--batch` set other sizes (small networks show where one update leaves the
cores idle). Both ways run the same updates per seed in the same command: `--iterations`
iterations of `--updates` updates, after one warm-up iteration each way that is not timed
(compiling).
Printed per algorithm: seeds x updates per second both ways and their ratio.

    python benchmarks/seeds.py [--seeds 4] [--updates 250] [--iterations 4]
"""

import argparse
import json
import tempfile
import time

import jax

from rljax_offline import IQLConfig, TD3BCConfig
from rljax_offline.acting.env_runner import record_expert

def configs(updates: int, batch: int) -> dict:
    common = dict(num_updates_per_iteration=updates, train_batch_size_per_learner=batch)
    return {"iql": IQLConfig().training(**common), "td3_bc": TD3BCConfig().training(**common)}


def prepared(config, data: str, hidden: list[int]):
    return (config.environment("Pendulum-v1").offline_data(input_=data)
            .rl_module(model_config={**config.model_config, "fcnet_hiddens": hidden})
            .evaluation(evaluation_interval=0).learners(num_devices=1))


def timed(step, iterations: int) -> float:
    step()  # warm-up: compiles
    t0 = time.perf_counter()
    for _ in range(iterations):
        step()
    return time.perf_counter() - t0


def one_program(config, seeds, iterations) -> float:
    runs = config.debugging(seeds=seeds).build()

    def step():
        jax.block_until_ready(runs.train()["mean"])

    try:
        return timed(step, iterations)
    finally:
        runs.stop()


def one_after_another(config, seeds, iterations) -> float:
    total = 0.0
    for seed in seeds:
        algo = config.debugging(seed=seed).build()
        try:
            total += timed(algo.train, iterations)
        finally:
            algo.stop()
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--updates", type=int, default=250)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--episodes", type=int, default=40)
    ap.add_argument("--hidden", default="256,256", help="hidden layers (d3rlpy's: 256,256)")
    ap.add_argument("--batch", type=int, default=256, help="batch size (d3rlpy's: 256)")
    args = ap.parse_args()
    data = tempfile.mkdtemp(prefix="seeds_bench_")
    record_expert("Pendulum-v1", data, num_episodes=args.episodes,
                  mix="expert:0.5,noise0.5:0.5", seed=0, progress=False)
    seeds = list(range(args.seeds))
    updates = args.seeds * args.updates * args.iterations
    hidden = [int(h) for h in args.hidden.split(",")]
    for name, config in configs(args.updates, args.batch).items():
        config = prepared(config, data, hidden)
        together = one_program(config, seeds, args.iterations)
        apart = one_after_another(config, seeds, args.iterations)
        print(json.dumps({
            "algorithm": name, "hidden": hidden, "batch": args.batch, "seeds": args.seeds,
            "updates_per_seed":
            args.updates * args.iterations, "device": str(jax.devices()[0].platform),
            "one_program_seed_updates_per_s": round(updates / together, 1),
            "one_after_another_seed_updates_per_s": round(updates / apart, 1),
            "speedup": round(apart / together, 2)}), flush=True)


if __name__ == "__main__":
    main()
