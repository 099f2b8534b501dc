"""Benchmark: EDAC against SAC-N and CQL on the same data (issue 36's fallback for EDAC, which
neither d3rlpy nor RLlib has: CORL's reference is a PyTorch single file whose D4RL / MuJoCo-py
dependencies do not install here, so our EDAC is held against its own ablations and CQL).

Four runs a seed, each our algorithm at its defaults (CORL's for EDAC, d3rlpy's for CQL), batch
256, the same transitions, evaluations and paired final evaluation on shared start states
(`_offline_runs.run_ours`, as `d3rlpy_compare.py`):

* `edac`: 10 critics, `eta=1` (the gradient-diversity term);
* `sac-n`: the same 10 critics, `eta=0` (An et al.'s SAC-N: the ensemble's minimum alone);
* `sac-2`: `eta=0`, 2 critics (offline SAC: what the ensemble is there to fix);
* `cql`: CQL, the conservative baseline EDAC's paper compares with.

Printed: each run's level (mean of the last three evaluations), the mean over seeds, updates/s
and the paired final difference of EDAC against each other run; a PNG of the evaluations.

    PYTHONPATH=. python benchmarks/edac_vs_ensembles.py [--seeds 0,1,2] [--updates 20000] \
        [--recipe pendulum-mixed | --data DIR --env ENV] [--runs DIR] [--only edac,sac-n,sac-2,cql]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _offline_runs import paired_difference, plot_runs, run_ours, summary  # noqa: E402
from d3rlpy_compare import FIGURES, kept, recording  # noqa: E402

from rljax_offline.algorithms.cql import CQLConfig  # noqa: E402
from rljax_offline.algorithms.edac import EDACConfig  # noqa: E402
from rljax_offline.apps.recipes import RECIPES  # noqa: E402

BATCH = 256
VARIANTS = {
    "edac": lambda: EDACConfig(),
    "sac-n": lambda: EDACConfig().training(eta=0.0),
    "sac-2": lambda: EDACConfig().training(eta=0.0, num_critics=2),
    "cql": lambda: CQLConfig(),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(VARIANTS), help=f"of {sorted(VARIANTS)}")
    ap.add_argument("--recipe", default="pendulum-mixed", help=f"of {sorted(RECIPES)}")
    ap.add_argument("--data", help="a folder of episodes instead of a recipe (e.g. a Hopper "
                    "set of `rljax-offline datasets make`); needs --env")
    ap.add_argument("--env", help="the env of --data")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--updates", type=int, default=20000)
    ap.add_argument("--evals", type=int, default=10)
    ap.add_argument("--eval-episodes", type=int, default=10)
    ap.add_argument("--final-episodes", type=int, default=100)
    ap.add_argument("--runs", help="folder where each run's history is saved and reused")
    ap.add_argument("--plots", default=FIGURES, help="folder for the PNG ('' for none)")
    args = ap.parse_args()
    if args.data and not args.env:
        ap.error("--data needs --env, the env its episodes come from (e.g. Hopper-v5)")
    if args.data:
        data, env_id, set_name = args.data, args.env, os.path.basename(args.data.rstrip("/"))
    else:
        data, env_id, set_name = (recording(args.recipe), RECIPES[args.recipe].env_id,
                                  args.recipe)
    names = args.only.split(",")
    histories: dict[str, list[dict]] = {name: [] for name in names}
    for seed in (int(s) for s in args.seeds.split(",")):
        for name in names:
            key = (f"{name}-{set_name}-s{seed}-u{args.updates}-"
                   f"e{args.evals}x{args.eval_episodes}")
            h = kept(args.runs, key, lambda name=name, seed=seed: run_ours(
                data, env_id, VARIANTS[name](), args.updates, seed, evals=args.evals,
                eval_episodes=args.eval_episodes, batch_size=BATCH,
                final_episodes=args.final_episodes))
            histories[name].append(h)
            print(json.dumps({"run": name, "seed": seed, "returns": h["returns"],
                              "updates_per_s": h["updates_per_s"]}), flush=True)
    if args.plots:
        path = plot_runs(histories, os.path.join(args.plots, f"edac-{set_name}.png"),
                         title=f"EDAC, SAC-N and CQL on {set_name}, batch {BATCH}")
        print(f"plot: {path}")
    rows = {name: summary(hs) for name, hs in histories.items()}
    print("\n| run | seeds | level (mean +- std) | levels | final (mean) | updates/s |"
          " EDAC - run, paired final (+- s.e.) |\n|---|---|---|---|---|---|---|")
    for name, s in rows.items():
        diff = (paired_difference(histories["edac"], histories[name])
                if "edac" in histories and name != "edac" else {})
        versus = (f"{diff['final_diff']:+.1f} +- {diff['final_diff_se']:.1f}"
                  if diff else "")
        print(f"| {name} | {len(s['seeds'])} | {s['level_mean']:.1f} +- {s['level_std']:.1f} | "
              f"{', '.join(f'{v:.0f}' for v in s['levels'])} | "
              f"{s.get('final_mean', float('nan')):.1f} | {s['updates_per_s']:.0f} | {versus} |")


if __name__ == "__main__":
    main()
