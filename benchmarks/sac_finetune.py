"""Benchmark: offline-to-online on Pendulum-v1. CQL and Cal-QL (CQL with the calibrated lower
bound, Nakamoto et al. 2023: the same settings, the bound the only difference) are trained on
the `pendulum-mixed` recipe (10% expert episodes, 90% uniform random torques;
`apps/recipes.py`), then SAC starts from each checkpoint (`training(init_from=...)`: actor,
twin Q networks, targets, temperature) and, beside them in the same command, SAC starts from
scratch, all with the same settings and seeds.

Each SAC run (RLlib's defaults but `actor_lr=3e-4`, the critic's, and learning after 1000
steps) samples `--steps` env steps (100 a `train()`, one update per env step), evaluating the
greedy policy on `--eval-episodes` episodes before the first step and every `--eval-every`
steps. Printed per run: the env steps at the first evaluation
>= `--target` (None: not within the budget) and the final level (the mean of the last three
evaluations; Pendulum's scripted expert scores about -150 to -200); then, per seed and as a
median, the ratio fine-tuned / scratch of the steps to the target (below 1: fine-tuning gets
there sooner), and Cal-QL / CQL.

    python benchmarks/sac_finetune.py [--seeds 0 1 2] [--steps 10000] [--target -250]
"""

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np

from rljax_offline import CalQLConfig, CQLConfig, SACConfig
from rljax_offline.apps.recipes import record_mixed

CACHE = os.path.join(tempfile.gettempdir(), "rljax_offline_bench")


def pendulum_mixed() -> str:
    path = os.path.join(CACHE, "sac_finetune_pendulum_mixed")
    if not os.path.isdir(path):
        record_mixed("pendulum-mixed", path)
    return path


def train_offline(config_class, data: str, iterations: int, out: str) -> dict:
    """CQL or Cal-QL on the mixed data (the settings `benchmarks/algorithms.py` reaches -300
    with CQL; Cal-QL's own defaults otherwise differ, pinned here to CQL's so the bound is
    the one difference)."""
    same = ({} if config_class is CQLConfig else
            {k: getattr(CQLConfig(), k) for k in ("critic_lr", "alpha_lr", "min_q_weight",
                                                  "num_actions", "deterministic_backup",
                                                  "lagrangian", "lagrangian_thresh")})
    algo = (config_class().environment("Pendulum-v1").offline_data(input_=data)
            .training(bc_iters=200, actor_lr=1e-3, num_updates_per_iteration=500, **same)
            .evaluation(evaluation_interval=iterations, evaluation_duration=20,
                        evaluation_num_envs=10).learners(num_devices=1)).build()
    t0 = time.perf_counter()
    for _ in range(iterations):
        result = algo.train()
    algo.save(out)
    algo.stop()
    return {"updates": iterations * 500, "seconds": round(time.perf_counter() - t0, 1),
            "eval_return": round(result["evaluation"]["env_runners"]["episode_return_mean"], 1)}


def run_sac(seed: int, name: str, init_from: str | None, args) -> dict:
    config = (SACConfig().environment("Pendulum-v1")
              .training(num_steps_sampled_before_learning_starts=1000, actor_lr=3e-4,
                        init_from=init_from)
              .evaluation(evaluation_duration=args.eval_episodes,
                          evaluation_num_envs=min(10, args.eval_episodes))
              .learners(num_devices=1).debugging(seed=seed))
    algo = config.build()
    t0 = time.perf_counter()
    curve = [(0, algo.evaluate()["episode_return_mean"])]
    while algo.env_steps_sampled < args.steps:
        algo.train()
        if algo.env_steps_sampled % args.eval_every == 0:
            curve.append((algo.env_steps_sampled, algo.evaluate()["episode_return_mean"]))
    algo.stop()
    reached = next((s for s, r in curve if r >= args.target), None)
    return {"seed": seed, "from": name, "steps_to_target": reached,
            "final_level": round(float(np.mean([r for _, r in curve[-3:]])), 1),
            # the worst evaluation after the start: the fine-tuning dip Cal-QL is made against
            "worst_after_start": round(float(min(r for _, r in curve[1:])), 1),
            "curve": [(s, round(r, 1)) for s, r in curve],
            "seconds": round(time.perf_counter() - t0, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=10_000, help="env steps of each SAC run")
    p.add_argument("--target", type=float, default=-250.0)
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--cql-iterations", type=int, default=10,
                   help="offline iterations of 500 updates each (CQL and Cal-QL)")
    args = p.parse_args()
    data = pendulum_mixed()
    root = tempfile.mkdtemp(prefix="sac_finetune_")
    starts = {"scratch": None}
    for name, config_class in (("cql", CQLConfig), ("cal_ql", CalQLConfig)):
        starts[name] = os.path.join(root, name)
        offline = train_offline(config_class, data, args.cql_iterations, starts[name])
        print(json.dumps({name: offline}), flush=True)
    ratios: dict[str, list] = {"cql/scratch": [], "cal_ql/scratch": [], "cal_ql/cql": []}
    for seed in args.seeds:
        steps = {}
        for name, init in starts.items():
            run = run_sac(seed, name, init, args)
            print(json.dumps(run), flush=True)
            # a run that never reached the target counts as the budget (a lower bound)
            reached = run["steps_to_target"]
            steps[name] = args.steps if reached is None else reached
        for key in ratios:
            a, b = key.split("/")
            ratios[key].append(max(steps[a], 1) / max(steps[b], 1))
        print(json.dumps({"seed": seed, "steps_to_target": steps}), flush=True)
    print(json.dumps({"median_ratio_of_steps_to_target": {
        k: round(statistics.median(v), 3) for k, v in ratios.items()},
        "target": args.target, "seeds": args.seeds}))


if __name__ == "__main__":
    main()
