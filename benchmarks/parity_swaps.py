"""Swap experiments behind docs/benchmarks/parity-20k.md: one difference from d3rlpy 2.8.1 at a
time, in our implementation, on one data set, to find which difference makes a gap.

Each variant is our algorithm at its defaults with one (or the listed) settings changed to what
d3rlpy does; every run is trained with `_offline_runs.run_ours` (the harness of
`d3rlpy_compare.py` and `mujoco_scoreboard.py`: batch 256, an evaluation of
`--eval-episodes` greedy episodes after each tenth, the paired final evaluation) and its
history kept as `--runs/swap-<data>-<variant>-s<seed>-u<updates>.json` (a rerun reuses it).
Printed: each run's level (mean of the last three evaluations) and final mean, then per
variant the mean +- std over seeds.

    python benchmarks/parity_swaps.py --data /tmp/rljax_offline_bench/mujoco/hopper-medium \\
        --env Hopper-v5 --variants iql,iql-tanh-mean,iql-torch-init --seeds 0 --updates 20000
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
from _offline_runs import CACHE, level, run_ours

from rljax_offline import IQLConfig
from rljax_offline.algorithms.td3_bc import TD3BCConfig
from rljax_offline.models.initializers import TORCH_DEFAULT

FLAX_DRAW = {k: None for k in TORCH_DEFAULT}

# name -> (our config, what it swaps towards d3rlpy 2.8.1's IQL / TD3+BC)
VARIANTS = {
    "iql": (lambda: IQLConfig(), "our defaults (RLlib's tanh-squashed actor, flax's draw)"),
    "iql-tanh-mean": (lambda: IQLConfig().training(actor_tanh_mean=True),
                      "d3rlpy's actor: N(tanh(mean), state-independent std) in the unit box"),
    "iql-plain-gaussian": (lambda: IQLConfig().training(actor_squashed=False),
                           "RLlib's plain Gaussian actor (no tanh)"),
    "iql-torch-init": (lambda: IQLConfig().rl_module(model_config=dict(TORCH_DEFAULT)),
                       "PyTorch's initial draw (d3rlpy's)"),
    "iql-tanh-mean-torch-init": (
        lambda: IQLConfig().training(actor_tanh_mean=True).rl_module(
            model_config=dict(TORCH_DEFAULT)),
        "d3rlpy's actor and PyTorch's draw"),
    "td3bc": (lambda: TD3BCConfig(), "our defaults (PyTorch's draw, data-normalized obs)"),
    "td3bc-flax-init": (lambda: TD3BCConfig().rl_module(model_config=FLAX_DRAW),
                        "flax's draw"),
    "td3bc-raw-obs": (lambda: TD3BCConfig().training(normalize_observations=False),
                      "observations not normalized"),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="the data set's folder (our Parquet)")
    ap.add_argument("--env", required=True, help="its env id")
    ap.add_argument("--variants", default="iql,iql-tanh-mean",
                    help=f"comma-separated, of {sorted(VARIANTS)}")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--updates", type=int, default=20000)
    ap.add_argument("--evals", type=int, default=10)
    ap.add_argument("--eval-episodes", type=int, default=10)
    ap.add_argument("--final-episodes", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--runs", default=os.path.join(CACHE, "swaps"))
    args = ap.parse_args()
    tag = os.path.basename(os.path.normpath(args.data))
    seeds = [int(s) for s in args.seeds.split(",")]
    table = {}
    for seed in seeds:
        for name in args.variants.split(","):
            make, _ = VARIANTS[name]
            path = os.path.join(args.runs, f"swap-{tag}-{name}-s{seed}-u{args.updates}.json")
            if os.path.exists(path):
                with open(path) as f:
                    h = json.load(f)
            else:
                h = run_ours(args.data, args.env, make(), args.updates, seed, evals=args.evals,
                             eval_episodes=args.eval_episodes, batch_size=args.batch_size,
                             final_episodes=args.final_episodes)
                os.makedirs(args.runs, exist_ok=True)
                with open(path, "w") as f:
                    json.dump(h, f)
            final = float(np.mean(h["final_returns"])) if h.get("final_returns") else None
            table.setdefault(name, []).append((level(h), final))
            print(json.dumps({"variant": name, "seed": seed, "level": level(h),
                              "final": final, "returns": h["returns"],
                              "updates_per_s": h["updates_per_s"]}), flush=True)
    for name, rows in table.items():
        lv = np.array([r[0] for r in rows])
        fin = [r[1] for r in rows if r[1] is not None]
        print(f"{name:28} level {lv.mean():8.1f} +- {lv.std(ddof=1) if len(lv) > 1 else 0:6.1f}"
              f"  final {np.mean(fin) if fin else float('nan'):8.1f}  ({len(rows)} seeds; "
              f"{VARIANTS[name][1]})")


if __name__ == "__main__":
    main()
