"""The multi-agent scoreboard: offline algorithms trained per module on the mpe2 data sets
(`rljax-offline datasets make mpe-...`: the scripted epsilon ladders and the IPPO-made
random / medium / medium-replay / expert sets), judged in the env.

Each run reads the env and the agents' modules from the set's `dataset.json` (simple_spread:
the three agents share `spread`; speaker-listener: `speaker` and `listener`; `--per-agent`:
one module per agent), trains `iterations` x `updates` updates, evaluates the team return (32
episodes) after every iteration; its level is the mean of the last three evaluations. Levels
are normalised with the references the data set stores (0 = uniform random, 100 = the scripted
heuristic or IPPO's expert, measured on 300 episodes). `matd3_bc` trains one team module
(decentralised actors, a centralised critic on the env's state and the joint action) where
`td3_bc` trains each module on its own. Prints one JSON line per run and one summary line
per (set, algorithm): mean and standard deviation over seeds, the data's own return and
updates per second; `--plot=DIR` draws each set's normalised evaluations over updates to
`DIR/<set>.png`. Needs the `[multiagent]` extra.

    PYTHONPATH=. python benchmarks/multi_agent_scoreboard.py DATA_ROOT [SEEDS] [ITERATIONS] \
        [UPDATES] [--per-agent] [--only=SET:ALGO,...|--only=continuous] [--plot=DIR]

DATA_ROOT holds one folder per set (`spread-eps0.1`, `spread-ippo-medium-replay`, ...;
`--only=continuous` reads `spread_c-eps0.5` and `speaker_listener_c-eps0.5`, made by
`datasets make mpe-simple_spread_continuous-heuristic-eps0.5` and
`mpe-simple_speaker_listener_continuous-heuristic-eps0.5`).
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from _offline_runs import plot_runs

from rljax_offline import BCConfig, CQLConfig, IQLConfig, MATD3BCConfig, TD3BCConfig

CONFIGS = {"bc": BCConfig, "cql": CQLConfig, "iql": IQLConfig, "td3_bc": TD3BCConfig,
           "matd3_bc": MATD3BCConfig}
DEFAULT_RUNS = ("spread-eps0.1:bc", "spread-eps0.7:bc", "spread-eps0.7:cql", "spread-eps0.7:iql")
# `--only=continuous`: the centralised critic against per-module TD3+BC on the continuous
# medium sets (the noisy heuristic, epsilon 0.5), simple_spread and speaker-listener
CONTINUOUS_RUNS = tuple(f"{s}:{a}" for s in ("spread_c-eps0.5", "speaker_listener_c-eps0.5")
                        for a in ("td3_bc", "matd3_bc"))


def _config(algo: str, data: str, seed: int, updates: int, per_agent: bool):
    with open(os.path.join(data, "dataset.json")) as f:
        meta = json.load(f)
    mapping = ({a: a for a in meta["agent_ids"]} if per_agent
               else dict(meta["agent_to_module"]))
    config = CONFIGS[algo]().environment(f"{meta['env_id']}:parallel_env",
                                         env_config=meta["env_kwargs"])
    config = config.multi_agent(policies=set(mapping.values()), policy_mapping_fn=mapping)
    return (config.offline_data(input_=data)
            .training(num_updates_per_iteration=updates, train_batch_size_per_learner=256)
            .evaluation(evaluation_interval=1, evaluation_duration=32, evaluation_num_envs=16)
            .debugging(seed=seed))


def run(data: str, algo: str, seed: int, iterations: int, updates: int,
        per_agent: bool) -> dict:
    algo_obj = _config(algo, data, seed, updates, per_agent).build()
    returns, update_s = [], 0.0
    for _ in range(iterations):
        result = algo_obj.train()
        returns.append(result["evaluation"]["env_runners"]["episode_return_mean"])
        update_s += result["learners"]["__all_modules__"]["learner_update_timer"] * updates
    algo_obj.stop()
    return {"level": float(np.mean(returns[-3:])), "returns": [round(r, 2) for r in returns],
            "updates": [updates * (i + 1) for i in range(iterations)],
            "updates_per_s": iterations * updates / update_s}


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    per_agent = "--per-agent" in sys.argv
    only = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--only=")), None)
    plot = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--plot=")), None)
    curves: dict[str, dict] = {}
    root = args[0]
    seeds = int(args[1]) if len(args) > 1 else 3
    iterations = int(args[2]) if len(args) > 2 else 6
    updates = int(args[3]) if len(args) > 3 else 500
    runs = CONTINUOUS_RUNS if only == "continuous" else only.split(",") if only else DEFAULT_RUNS
    for entry in runs:
        name, algo = entry.split(":")
        data = os.path.join(root, name)
        with open(os.path.join(data, "dataset.json")) as f:
            meta = json.load(f)
        lo, hi = meta["ref_min_score"], meta["ref_max_score"]
        levels, speeds = [], []
        t0 = time.perf_counter()
        for seed in range(seeds):
            r = run(data, algo, seed, iterations, updates, per_agent)
            levels.append(r["level"])
            speeds.append(r["updates_per_s"])
            curves.setdefault(name, {"norm": (lo, hi), "data": meta["return_mean"],
                                     "runs": {}})["runs"].setdefault(
                algo, []).append(r)
            print(json.dumps({"set": name, "algo": algo, "seed": seed, **r}), flush=True)
        norm = [100 * (x - lo) / (hi - lo) for x in levels]
        print(json.dumps({
            "set": name, "algo": algo, "modules": "per-agent" if per_agent else "shared",
            "data_return": round(meta["return_mean"], 2),
            "level_mean": round(float(np.mean(levels)), 2),
            "level_std": round(float(np.std(levels)), 2),
            "normalized_mean": round(float(np.mean(norm)), 1),
            "normalized_std": round(float(np.std(norm)), 1),
            "updates_per_s": round(float(np.median(speeds)), 1), "seeds": seeds,
            "updates": iterations * updates, "minutes": round((time.perf_counter() - t0) / 60,
                                                               1)}), flush=True)
    for name, c in curves.items() if plot else ():
        lo, hi = c["norm"]
        path = plot_runs(c["runs"], os.path.join(plot, f"{name}.png"),
                         title=f"{name} (the data: "
                               f"{100 * (c['data'] - lo) / (hi - lo):.0f})",
                         normalize=lambda r, lo=lo, hi=hi:
                         100 * (r - lo) / (hi - lo))
        print(json.dumps({"plot": path}), flush=True)


if __name__ == "__main__":
    main()
