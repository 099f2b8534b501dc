"""Why N seeds in one program run at about the speed of N runs one after another on this
CPU: a measurement, printed as one JSON line per case.

1. The seeds' update program (`learning.seeds.scan_over_seeds`, IQL and TD3+BC at d3rlpy's
   [256, 256] networks and batch 256): XLA's cost analysis gives its floating-point
   operations per update for 1 seed and for N; timing `--updates` updates gives the rate
   achieved (GFLOP/s) with 1 seed and N seeds in one program.
2. The CPU's rate on the same matrix products alone: `[batch, 256] @ [256, 256]` float32,
   one at a time and N batched as the seed axis makes them (`vmap`), in a jitted loop.

If one seed's program already runs near the rate of its bare matrix products, and N batched
products run no faster per product than one, the hardware is busy with arithmetic and a
seed axis cannot make N runs faster than one after another: what the CPU does not do is
wait (the loop of updates is one dispatch per iteration both ways, `lax.scan`).

    python benchmarks/seeds_profile.py [--seeds 4] [--updates 200]
"""

import argparse
import json
import tempfile
import time

import jax
import jax.numpy as jnp
from jax import lax

from rljax_offline import IQLConfig, TD3BCConfig
from rljax_offline.acting.env_runner import record_expert
from rljax_offline.learning.seeds import scan_over_seeds


def matmul_rate(seeds: int, batch: int, hidden: int, reps: int = 200) -> float:
    """GFLOP/s of `seeds` batched `[batch, hidden] @ [hidden, hidden]` products (float32)."""
    x = jnp.ones((seeds, batch, hidden), jnp.float32)
    w = jnp.full((seeds, hidden, hidden), 1e-3, jnp.float32)

    @jax.jit
    def loop(x, w):
        return lax.fori_loop(0, reps, lambda _, y: jnp.tanh(jnp.einsum("sbh,shk->sbk", y, w)),
                             x)

    jax.block_until_ready(loop(x, w))
    t0 = time.perf_counter()
    jax.block_until_ready(loop(x, w))
    dt = time.perf_counter() - t0
    return 2.0 * seeds * batch * hidden * hidden * reps / dt / 1e9


def program_rate(config, seeds: list[int], updates: int) -> dict:
    """Per-update GFLOP (XLA's cost analysis) and achieved GFLOP/s of the seeds' program."""
    runs = config.debugging(seeds=seeds).build()
    try:
        dp, data = runs.algo.dp, runs.algo.data.device_data
        run = scan_over_seeds(dp, updates, config.sample_unit)
        runs.states, _ = run(runs.states, data)  # compiles
        jax.block_until_ready(runs.states)
        t0 = time.perf_counter()
        runs.states, _ = run(runs.states, data)
        jax.block_until_ready(runs.states)
        dt = time.perf_counter() - t0
        one = scan_over_seeds(dp, 1, config.sample_unit)
        one(jax.tree_util.tree_map(lambda x: x.copy(), runs.states), data)
        program = next(iter(one.programs.values()))
        cost = program.lower(runs.states, data.columns, data.episode_starts,
                             data.episode_lengths).compile().cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        gflop = float(cost["flops"]) / 1e9
        return {"gflop_per_update_all_seeds": round(gflop, 3),
                "seed_updates_per_s": round(len(seeds) * updates / dt, 1),
                "gflop_per_s": round(gflop * updates / dt, 1)}
    finally:
        runs.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--updates", type=int, default=200)
    args = ap.parse_args()
    hidden, batch = 256, 256
    print(json.dumps({"matmul": f"[{batch},{hidden}]@[{hidden},{hidden}] float32",
                      "gflop_per_s_1": round(matmul_rate(1, batch, hidden), 1),
                      f"gflop_per_s_{args.seeds}_batched":
                      round(matmul_rate(args.seeds, batch, hidden), 1)}), flush=True)
    data = tempfile.mkdtemp(prefix="seeds_profile_")
    record_expert("Pendulum-v1", data, num_episodes=20, mix="expert:0.5,noise0.5:0.5",
                  seed=0, progress=False)
    for name, config in {"iql": IQLConfig(), "td3_bc": TD3BCConfig()}.items():
        config = (config.environment("Pendulum-v1").offline_data(input_=data)
                  .training(train_batch_size_per_learner=batch)
                  .rl_module(model_config={**config.model_config,
                                           "fcnet_hiddens": [hidden, hidden]})
                  .evaluation(evaluation_interval=0).learners(num_devices=1))
        one = program_rate(config, [0], args.updates)
        many = program_rate(config, list(range(args.seeds)), args.updates)
        print(json.dumps({"algorithm": name, "one_seed": one, f"{args.seeds}_seeds": many,
                          "speedup": round(many["seed_updates_per_s"]
                                           / one["seed_updates_per_s"], 2)}), flush=True)


if __name__ == "__main__":
    main()
