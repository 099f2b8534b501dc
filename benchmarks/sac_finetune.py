"""Benchmark: offline-to-online. CQL and Cal-QL (CQL with the calibrated lower bound,
Nakamoto et al. 2023: the same settings, the bound the only difference) are trained offline on
`--data`, then fine-tuned online from each checkpoint, and, beside them in the same command,
SAC starts from scratch, all with the same seeds. The data (`--data`):

* `pendulum-mixed` (Pendulum-v1; the default): the `apps/recipes.py` set (10% expert
  episodes, 90% uniform random torques), both algorithms at the CQL settings
  `benchmarks/algorithms.py` reaches -300 with (Cal-QL's own defaults pinned to CQL's);
* a MuJoCo set of `apps/mujoco_datasets.py` (e.g. `hopper-medium-replay`, under
  `--data-root`, made there when missing as the parity harness makes it): both at Cal-QL's
  defaults (d3rlpy's; CQL's own defaults pinned to Cal-QL's), the settings
  `benchmarks/d3rlpy_compare.py` holds Cal-QL at d3rlpy's level with.

Two ways to fine-tune (`--fine-tune-with`):

* `sac`: SAC starts from each checkpoint (`SACConfig().training(init_from=...)`: actor, twin
  Q networks, targets, temperature), the regulariser and the offline data left behind;
* `own`: each algorithm goes on with its own losses online
  (`training(online_fine_tuning=True, init_from=...)`), every minibatch half offline rows,
  half online replay (`offline_fraction=0.5`, Cal-QL's fine-tuning).

Each online run (SAC: RLlib's defaults but `actor_lr=3e-4`, the critic's; `own`: the offline
run's settings) learns after 1000 env steps, one update per env step, and samples `--steps`
env steps, evaluating the greedy policy on `--eval-episodes` episodes before the first step
and every `--eval-every` steps. Printed per run: the env steps at the first evaluation
>= `--target` (None: not within the budget) and the final level (the mean of the last three
evaluations; Pendulum's scripted expert scores about -150 to -200); then, per seed and as a
median, the ratio fine-tuned / scratch of the steps to the target (below 1: fine-tuning gets
there sooner), and Cal-QL / CQL. `--offline-dir` keeps the offline checkpoints for a later
command (the other way to fine-tune, other seeds: several commands, one a seed, can share
them once the first has made them); `--plot PNG` draws every run's curve, one panel a seed
(`--from-log LOG...` draws them from earlier outputs and prints their ratios, running
nothing).

    python benchmarks/sac_finetune.py [--seeds 0 1 2] [--steps 10000] [--target -250]
        [--fine-tune-with sac|own] [--offline-dir DIR] [--plot PNG]
    python benchmarks/sac_finetune.py --data hopper-medium-replay --target 250 \
        --steps 15000 --cql-iterations 12 --fine-tune-with own
"""

import argparse
import dataclasses
import json
import os
import statistics
import tempfile
import time

import numpy as np

from _common import CACHE
from d3rlpy_compare import recording as parity_recording

from rljax_offline import CalQLConfig, CQLConfig, SACConfig
from rljax_offline.apps import mujoco_datasets
from rljax_offline.apps.plotting import save_fine_tuning_curves
from rljax_offline.apps.recipes import record_mixed

PENDULUM = "pendulum-mixed"


def recording(name: str, data_root: str) -> tuple[str, str]:
    """The folder of the data set `name` (recorded or made first when missing) and its env:
    Pendulum's in this benchmark's own cache folder, a MuJoCo set as the parity harness
    makes and keeps it."""
    if name != PENDULUM:
        return parity_recording(name, data_root)
    path = os.path.join(CACHE, "sac_finetune_pendulum_mixed")
    if not os.path.isdir(path):
        record_mixed(PENDULUM, path)
    return path, "Pendulum-v1"


def defaults_of(source, target) -> dict:
    """`source`'s training defaults where `target`'s differ: what makes one algorithm's run
    the other's settings, so that the calibrated bound is the one difference."""
    a, b = source(), target()
    return {f.name: getattr(a, f.name) for f in dataclasses.fields(target)
            if f.metadata.get("group") == "training" and hasattr(a, f.name)
            and getattr(a, f.name) != getattr(b, f.name)}


def offline_config(config_class, data: str, env_id: str, pendulum: bool):
    """CQL or Cal-QL on `data`: on Pendulum at CQL's settings (Cal-QL's pinned to them), on a
    MuJoCo set at Cal-QL's (CQL's pinned to them); 500 updates an iteration."""
    if pendulum:
        same = {} if config_class is CQLConfig else defaults_of(CQLConfig, CalQLConfig)
        same.update(bc_iters=200, actor_lr=1e-3)
    else:
        same = {} if config_class is CalQLConfig else defaults_of(CalQLConfig, CQLConfig)
    return (config_class().environment(env_id).offline_data(input_=data)
            .training(num_updates_per_iteration=500, **same)
            .learners(num_devices=1))


def train_offline(config, iterations: int, out: str) -> dict:
    """The offline run of `config`, saved at `out` (kept there when it exists)."""
    if os.path.isdir(out):
        return {"updates": iterations * 500, "reused": out}
    algo = config.evaluation(evaluation_interval=iterations, evaluation_duration=20,
                             evaluation_num_envs=10).build()
    t0 = time.perf_counter()
    for _ in range(iterations):
        result = algo.train()
    algo.save(out)
    algo.stop()
    return {"updates": iterations * 500, "seconds": round(time.perf_counter() - t0, 1),
            "eval_return": round(result["evaluation"]["env_runners"]["episode_return_mean"], 1)}


def online_config(name: str, init_from: str | None, data: str, env_id: str, args):
    """SAC from scratch or from `init_from`, or (`--fine-tune-with own`) the offline
    algorithm `name` going on with its own losses."""
    if init_from is None or args.fine_tune_with == "sac":
        return SACConfig().environment(env_id).training(
            num_steps_sampled_before_learning_starts=1000, actor_lr=3e-4, init_from=init_from)
    config_class = CQLConfig if name == "cql" else CalQLConfig
    return offline_config(config_class, data, env_id, args.data == PENDULUM).training(
        online_fine_tuning=True, init_from=init_from, offline_fraction=0.5,
        num_steps_sampled_before_learning_starts=1000)


def run_online(seed: int, name: str, init_from: str | None, data: str, env_id: str,
               args) -> dict:
    config = (online_config(name, init_from, data, env_id, args)
              .evaluation(evaluation_duration=args.eval_episodes,
                          evaluation_num_envs=min(10, args.eval_episodes))
              .learners(num_devices=1).debugging(seed=seed))
    algo = config.build()
    t0 = time.perf_counter()
    curve = [(0, algo.evaluate()["episode_return_mean"])]
    while algo.env_steps_sampled < args.steps:
        before = algo.env_steps_sampled
        algo.train()
        if algo.env_steps_sampled // args.eval_every > before // args.eval_every:
            curve.append((algo.env_steps_sampled, algo.evaluate()["episode_return_mean"]))
    algo.stop()
    reached = next((s for s, r in curve if r >= args.target), None)
    return {"seed": seed, "from": name, "with": "sac" if init_from is None
            else args.fine_tune_with, "steps_to_target": reached,
            "final_level": round(float(np.mean([r for _, r in curve[-3:]])), 1),
            # the worst evaluation after the start: the fine-tuning dip Cal-QL is made against
            "worst_after_start": round(float(min(r for _, r in curve[1:])), 1),
            "curve": [(s, round(r, 1)) for s, r in curve],
            "seconds": round(time.perf_counter() - t0, 1)}


def median_ratios(runs: list[dict], budget: int) -> dict:
    """Per seed, the ratio of steps to the target between starts (a run that never reached
    it counts as the budget: a lower bound), as a median over the seeds that ran both."""
    steps: dict[int, dict] = {}
    for run in runs:
        reached = run["steps_to_target"]
        steps.setdefault(run["seed"], {})[run["from"]] = budget if reached is None else reached
    ratios: dict[str, list] = {"cql/scratch": [], "cal_ql/scratch": [], "cal_ql/cql": []}
    for by_start in steps.values():
        for key in ratios:
            a, b = key.split("/")
            if a in by_start and b in by_start:
                ratios[key].append(max(by_start[a], 1) / max(by_start[b], 1))
    return {k: round(statistics.median(v), 3) for k, v in ratios.items() if v}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--data", default=PENDULUM,
                   choices=(PENDULUM, *sorted(mujoco_datasets.RECIPES)),
                   help="the offline data and the env it comes from")
    p.add_argument("--data-root", default=os.path.join(CACHE, "mujoco"),
                   help="where a MuJoCo set is kept (made there when missing)")
    p.add_argument("--steps", type=int, default=10_000, help="env steps of each online run")
    p.add_argument("--target", type=float, default=None,
                   help="the return to reach (Pendulum: -250 when not given)")
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--cql-iterations", type=int, default=10,
                   help="offline iterations of 500 updates each (CQL and Cal-QL)")
    p.add_argument("--fine-tune-with", choices=("sac", "own"), default="sac",
                   help="sac: SAC from each checkpoint; own: each algorithm's own losses on "
                   "50/50 offline/online minibatches")
    p.add_argument("--offline-dir", default=None,
                   help="where the offline checkpoints are kept (reused when there)")
    p.add_argument("--no-scratch", action="store_true",
                   help="leave SAC from scratch out (run by an earlier command)")
    p.add_argument("--plot", default=None, help="a PNG of every run's curve, one panel a seed")
    p.add_argument("--from-log", nargs="+", default=None,
                   help="run nothing: plot the runs these earlier outputs printed")
    args = p.parse_args()
    if args.target is None:
        if args.data != PENDULUM:
            p.error(f"--target: give the return to reach on {args.data}")
        args.target = -250.0
    title = f"{args.data}: online after offline training, target {args.target:g}"
    if args.from_log:
        runs = [json.loads(line) for log in args.from_log for line in open(log)
                if line.startswith('{"seed"') and '"curve"' in line]
        print(json.dumps({"median_ratio_of_steps_to_target": median_ratios(runs, args.steps),
                          "target": args.target, "seeds": sorted({r["seed"] for r in runs})}))
        print(save_fine_tuning_curves(runs, args.plot or "fine_tuning.png",
                                      target=args.target, title=title))
        return
    data, env_id = recording(args.data, args.data_root)
    root = args.offline_dir or tempfile.mkdtemp(prefix="sac_finetune_")
    starts = {} if args.no_scratch else {"scratch": None}
    for name, config_class in (("cql", CQLConfig), ("cal_ql", CalQLConfig)):
        # named by data and updates, so one --offline-dir holds every set's checkpoints
        starts[name] = os.path.join(root, f"{args.data}-{name}-{args.cql_iterations * 500}")
        config = offline_config(config_class, data, env_id, args.data == PENDULUM)
        offline = train_offline(config, args.cql_iterations, starts[name])
        print(json.dumps({name: offline}), flush=True)
    runs = []
    for seed in args.seeds:
        for name, init in starts.items():
            run = run_online(seed, name, init, data, env_id, args)
            runs.append(run)
            print(json.dumps(run), flush=True)
        print(json.dumps({"seed": seed, "steps_to_target": {
            r["from"]: r["steps_to_target"] for r in runs if r["seed"] == seed}}), flush=True)
    print(json.dumps({"median_ratio_of_steps_to_target": median_ratios(runs, args.steps),
                      "target": args.target, "seeds": args.seeds}))
    if args.plot:
        print(save_fine_tuning_curves(runs, args.plot, target=args.target, title=title))


if __name__ == "__main__":
    main()
