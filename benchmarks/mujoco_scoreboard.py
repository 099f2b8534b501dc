"""The scoreboard: BC, CQL, IQL and TD3+BC on the MuJoCo data sets made here
(`rljax-offline datasets make`), D4RL-normalized, against d3rlpy 2.8 on the same data. (Not
named `mujoco.py`: run as a script, benchmarks/ comes first on sys.path, and that name would
shadow the `mujoco` package.)

Each data set (made into `--data-root/NAME` when missing, from the env's cached SAC run) is
trained on by each algorithm for several seeds, evaluated greedily after each tenth of the run
(`_offline_runs.py`, the harness `d3rlpy_compare.py` uses too); d3rlpy's matching algorithm at
its defaults runs on the same transitions when `--d3rlpy-python` is given, with the same batch
size (d3rlpy's default) and number of updates. Printed per data set and algorithm: the level
(mean of the last three evaluations), D4RL-normalized with the data set's own constants
(`dataset.json`: the random and expert policies' returns measured when it was made), mean +-
std over seeds for each library, updates/s of each (evaluation and the first, compiling part
excluded) and their ratio. Every run's history is kept in `--runs` (an interrupted
benchmark resumes where it stopped), the table in `--out/scoreboard.md`, and a plot of
normalized evaluations over updates per data set in `--out/<data set>.png`.

    python benchmarks/mujoco_scoreboard.py --datasets hopper-medium,hopper-medium-replay \\
        --data-root data/mujoco --updates 5000 --cql-updates 2000 --seeds 0,1,2 \\
        --d3rlpy-python /work/venvs/d3rlpy/bin/python
"""

from __future__ import annotations

import argparse
import json
import os

from _offline_runs import (
    CACHE,
    D3RLPY_BATCH,
    paired_difference,
    plot_runs,
    run_d3rlpy,
    run_ours,
    summary,
)

from rljax_offline.algorithms.registry import config_class
from rljax_offline.apps.mujoco_datasets import normalized_score, read_meta, recipe
from rljax_offline.apps.mujoco_record import make_dataset

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "figures", "mujoco")
D3RLPY_NAME = {"bc": "BC", "cql": "CQL", "iql": "IQL", "td3_bc": "TD3PlusBC"}


def dataset(name: str, root: str, args) -> str:
    """The folder of data set `name` under `root`, made first if missing."""
    path = os.path.join(root, name)
    if not os.path.isfile(os.path.join(path, "dataset.json")):
        meta = make_dataset(name, path, num_steps=args.num_steps, env_steps=args.env_steps,
                            seed=args.data_seed, log=print)
        print(json.dumps({"made": name, **{k: meta[k] for k in (
            "num_episodes", "num_steps", "return_mean", "ref_min_score", "ref_max_score",
            "notes")}}), flush=True)
    return path


def cached_run(out: str, key: str, fn, *args, **kwargs) -> dict | None:
    """The history saved under `key`, else `fn(*args, **kwargs)` saved there (None instead
    with `fn=None`: a report of the finished runs only)."""
    path = os.path.join(out, key + ".json")
    if os.path.isfile(path):
        with open(path) as f:
            return json.load(f)
    if fn is None:
        return None
    history = fn(*args, **kwargs)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(history, f)
    os.replace(path + ".tmp", path)
    return history


def row(name: str, algo: str, ours: dict, theirs: dict | None, paired: str = "-") -> str:
    def cell(s):
        if not s:
            return "-"
        return f"{s['level_mean']:.1f} +- {s['level_std']:.1f} ({len(s['seeds'])} seeds)"

    speed = f"{ours['updates_per_s']:.0f}"
    if theirs:
        speed += (f" vs {theirs['updates_per_s']:.0f} "
                  f"({ours['updates_per_s'] / theirs['updates_per_s']:.2f}x)")
    return (f"| {name} | {algo} | {ours['updates']} | {cell(ours)} | {cell(theirs)} | "
            f"{paired} | {speed} |")


def paired_cell(ours: list[dict], theirs: list[dict], norm) -> str:
    """Ours - d3rlpy on the paired final evaluation (`_paired_eval`'s start states), in the
    table's units (`norm` is affine: a difference scales by its slope), +- its standard
    error over seeds; "-" when a side has no final evaluation."""
    d = paired_difference(ours, theirs) if theirs else {}
    if not d:
        return "-"
    slope = norm(1.0) - norm(0.0)
    return f"{d['final_diff'] * slope:+.1f} +- {d['final_diff_se'] * slope:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default="hopper-medium,hopper-medium-replay")
    ap.add_argument("--data-root", default=os.path.join(CACHE, "mujoco"),
                    help="where the data sets are (made when missing)")
    ap.add_argument("--algos", default="bc,cql,iql,td3_bc")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--updates", type=int, default=5000, help="updates per run")
    ap.add_argument("--cql-updates", type=int, default=2000,
                    help="CQL's updates (about 20/s at batch 256 on this CPU)")
    ap.add_argument("--evals", type=int, default=10, help="evaluations per run")
    ap.add_argument("--eval-episodes", type=int, default=5)
    ap.add_argument("--final-episodes", type=int, default=0,
                    help="then each final policy on _paired_eval's episodes (the same start "
                         "states for both libraries: the paired column)")
    ap.add_argument("--d3rlpy-python", help="interpreter with d3rlpy 2.8 installed")
    ap.add_argument("--d3rlpy-threads", type=int, default=1,
                    help="torch's threads in d3rlpy's interpreter (OMP_NUM_THREADS; 0: torch's "
                         "default). On this shared 2-core CPU its default two threads ran BC "
                         "at 7.9 updates/s, one thread at ~250")
    ap.add_argument("--d3rlpy-algos", default=None,
                    help="the algorithms d3rlpy runs too (default: all of --algos)")
    ap.add_argument("--out", default=OUT, help="table and plots")
    ap.add_argument("--runs", default=os.path.join(CACHE, "mujoco_runs"),
                    help="each run's history (a rerun takes the finished ones from here)")
    ap.add_argument("--env-steps", type=int, default=30_000, help="SAC budget (making data)")
    ap.add_argument("--num-steps", type=int, default=50_000, help="data set size (making)")
    ap.add_argument("--data-seed", type=int, default=0, help="seed of the data (making)")
    ap.add_argument("--report-only", action="store_true",
                    help="table and plots from the finished runs in --runs, nothing trained")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    names, algos = args.datasets.split(","), args.algos.split(",")
    paths = {name: dataset(name, args.data_root, args) for name in names}

    def history(library, name, algo, seed, train):
        """One run's history (trained first when `train` and not yet in --runs)."""
        d3 = D3RLPY_NAME[algo]
        updates = args.cql_updates if algo == "cql" else args.updates
        common = dict(evals=args.evals, eval_episodes=args.eval_episodes,
                      batch_size=D3RLPY_BATCH[d3], final_episodes=args.final_episodes)
        env_id = recipe(name).env_id
        if library == "ours":
            return cached_run(args.runs, f"{name}-ours-{algo}-{updates}-s{seed}",
                              run_ours if train else None, paths[name], env_id,
                              config_class(algo)(), updates, seed, **common)
        return cached_run(args.runs, f"{name}-d3rlpy-{d3}-{updates}-s{seed}",
                          run_d3rlpy if train else None, args.d3rlpy_python, paths[name],
                          env_id, d3, updates, seed, threads=args.d3rlpy_threads, **common)

    libraries = ["ours"] + (["d3rlpy"] if args.d3rlpy_python else [])
    d3rlpy_algos = args.d3rlpy_algos.split(",") if args.d3rlpy_algos else algos
    if not args.report_only:  # ours first, then d3rlpy; seed by seed over every cell, so a
        for library in libraries:  # cut-short run has whole seeds
            for seed in seeds:
                for name in names:
                    for algo in algos if library == "ours" else d3rlpy_algos:
                        history(library, name, algo, seed, True)
    lines = ["| data set | algorithm | updates | ours (normalized level) | d3rlpy 2.8.1 | "
             "ours - d3rlpy, paired final | updates/s ours vs d3rlpy |",
             "|---|---|---|---|---|---|---|"]
    for name in names:
        meta = read_meta(paths[name])
        norm = lambda r, m=meta: float(normalized_score(r, m))  # noqa: E731
        if meta["ref_max_score"] <= meta["ref_min_score"]:  # a SAC run that learned nothing
            print(json.dumps({"dataset": name, "warning": "raw returns: " + meta["notes"][0]}))
            norm = float
        runs = {}
        for algo in algos:
            found = {lib: [h for s in seeds if (h := history(lib, name, algo, s, False))]
                     for lib in libraries}
            if not found["ours"]:
                continue
            runs[f"ours {algo}"] = found["ours"]
            if found.get("d3rlpy"):
                runs[f"d3rlpy {D3RLPY_NAME[algo]}"] = found["d3rlpy"]
            s_ours = summary(found["ours"], norm)
            s_theirs = summary(found["d3rlpy"], norm) if found.get("d3rlpy") else None
            print(json.dumps({"dataset": name, "algo": algo, "ours": s_ours,
                              "d3rlpy": s_theirs}), flush=True)
            lines.append(row(name, algo, s_ours, s_theirs,
                             paired_cell(found["ours"], found.get("d3rlpy"), norm)))
        if not runs:
            continue
        plot_runs(runs, os.path.join(args.out, f"{name}.png"), normalize=norm,
                  title=f"{name}, {meta['num_steps']} steps (0 random, 100 expert "
                        f"= {meta['ref_max_score']:.0f})")
        lines.append(f"| {name} | (the data's mean return) | | {norm(meta['return_mean']):.1f} "
                     "| | | |")
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(args.out, "scoreboard.md"), "w") as f:
        f.write(table + "\n")


if __name__ == "__main__":
    main()
