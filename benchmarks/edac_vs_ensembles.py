"""Benchmark: EDAC against CORL's EDAC, SAC-N and CQL on the same data (neither d3rlpy nor RLlib
has EDAC; CORL's reference is a PyTorch single file whose D4RL / MuJoCo-py dependencies do not
install here, so `_corl_edac_worker.py` runs its classes unchanged on our rows).

One run a variant and seed, each our algorithm at its defaults (CORL's for EDAC, d3rlpy's for
CQL), batch 256, the same transitions, evaluations and paired final evaluation on shared start
states (`_offline_runs.run_ours`, as `d3rlpy_compare.py`):

* `edac`: 10 critics, `eta=1` (the gradient-diversity term);
* `sac-n`: the same 10 critics, `eta=0` (An et al.'s SAC-N: the ensemble's minimum alone);
* `sac-2`: `eta=0`, 2 critics (offline SAC: what the ensemble is there to fix);
* `cql`: CQL, the conservative baseline EDAC's paper compares with;
* `corl-edac`: CORL's `edac.py` at its `TrainConfig` defaults (with `--corl-file` and
  `--corl-python`, an interpreter with PyTorch and gymnasium: d3rlpy's will do), evaluated
  as d3rlpy's runs are (`_offline_runs.run_corl_edac`).

`--num-critics N` sets every ensemble's size but offline SAC's on both sides (CORL's
`hopper-medium-v2` file: 50).

Printed: each run's level (mean of the last three evaluations), the mean over seeds, updates/s
and the paired final difference of EDAC against each other run; a PNG of the evaluations.

    PYTHONPATH=. python benchmarks/edac_vs_ensembles.py [--seeds 0,1,2] [--updates 20000] \
        [--recipe pendulum-mixed | hopper-medium | --data DIR --env ENV] [--runs DIR]
        [--only edac,sac-n,sac-2,cql,corl-edac]
        [--corl-file CORL/algorithms/offline/edac.py --corl-python PYTHON] [--num-critics N]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _offline_runs import (  # noqa: E402
    CACHE,
    paired_difference,
    plot_runs,
    run_corl_edac,
    run_ours,
    summary,
)
from d3rlpy_compare import FIGURES, kept, recording  # noqa: E402

from rljax_offline.algorithms.cql import CQLConfig  # noqa: E402
from rljax_offline.algorithms.edac import EDACConfig  # noqa: E402
from rljax_offline.apps.recipes import RECIPES  # noqa: E402
from rljax_offline.apps import mujoco_datasets  # noqa: E402

BATCH = 256
VARIANTS = {
    "edac": lambda n: EDACConfig().training(**({"num_critics": n} if n else {})),
    "sac-n": lambda n: EDACConfig().training(eta=0.0, **({"num_critics": n} if n else {})),
    "sac-2": lambda n: EDACConfig().training(eta=0.0, num_critics=2),
    "cql": lambda n: CQLConfig(),
}
CORL = "corl-edac"  # CORL's own EDAC: needs --corl-file and --corl-python


def one_run(args, name: str, data: str, env_id: str, seed: int) -> dict:
    """One variant's run on `data` at `seed`, batch `BATCH`, evaluated alike on every side."""
    common = dict(evals=args.evals, eval_episodes=args.eval_episodes,
                  final_episodes=args.final_episodes)
    if name == CORL:
        return run_corl_edac(args.corl_python, args.corl_file, data, env_id, args.updates,
                             seed, settings={"batch_size": BATCH, **(
                                 {"num_critics": args.num_critics} if args.num_critics
                                 else {})}, **common)
    return run_ours(data, env_id, VARIANTS[name](args.num_critics), args.updates, seed,
                    batch_size=BATCH, **common)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help=f"of {sorted([*VARIANTS, CORL])} (default: all of them, "
                    f"{CORL} with --corl-file)")
    ap.add_argument("--recipe", default="pendulum-mixed",
                    help=f"of {sorted([*RECIPES, *mujoco_datasets.RECIPES])}")
    ap.add_argument("--data-root", default=os.path.join(CACHE, "mujoco"),
                    help="where a MuJoCo --recipe's set is (made when missing)")
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
    ap.add_argument("--corl-file", help="CORL's algorithms/offline/edac.py, run unchanged")
    ap.add_argument("--corl-python", default=sys.executable,
                    help="an interpreter with PyTorch and gymnasium, for --corl-file")
    ap.add_argument("--num-critics", type=int,
                    help="every ensemble's size but sac-2's, CORL's too (default: CORL's 10)")
    args = ap.parse_args()
    if args.data and not args.env:
        ap.error("--data needs --env, the env its episodes come from (e.g. Hopper-v5)")
    names = (args.only.split(",") if args.only
             else [*VARIANTS, *([CORL] if args.corl_file else [])])
    unknown = set(names) - {*VARIANTS, CORL}
    if unknown:
        ap.error(f"--only: unknown {sorted(unknown)}; of {sorted([*VARIANTS, CORL])}")
    if CORL in names and not args.corl_file:
        ap.error(f"{CORL} needs --corl-file, CORL's algorithms/offline/edac.py")
    if args.data:
        data, env_id, set_name = args.data, args.env, os.path.basename(args.data.rstrip("/"))
    else:
        (data, env_id), set_name = recording(args.recipe, args.data_root), args.recipe
    critics = f"-n{args.num_critics}" if args.num_critics else ""
    histories: dict[str, list[dict]] = {name: [] for name in names}
    for seed in (int(s) for s in args.seeds.split(",")):
        for name in names:
            key = (f"{name}{critics if name != 'sac-2' else ''}-{set_name}-s{seed}-"
                   f"u{args.updates}-e{args.evals}x{args.eval_episodes}")
            h = kept(args.runs, key, lambda name=name, seed=seed: one_run(
                args, name, data, env_id, seed))
            histories[name].append(h)
            print(json.dumps({"run": name, "seed": seed, "returns": h["returns"],
                              "updates_per_s": h["updates_per_s"]}), flush=True)
    if args.plots:
        path = plot_runs(histories, os.path.join(args.plots, f"edac{critics}-{set_name}.png"),
                         title=f"{', '.join(names)} on {set_name}, batch {BATCH}"
                               + (f", {args.num_critics} critics" if critics else ""))
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
