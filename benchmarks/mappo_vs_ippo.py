"""MAPPO against IPPO on mpe2 simple_spread_v3, and IPPO with two modules on
simple_speaker_listener_v4: team return against env steps and minutes.

Every run takes the settings of the IPPO that makes the simple_spread data sets
(`apps.multi_agent_ippo.ippo_config`: lr 5e-4, 2,000 env steps a batch, minibatches of 1,536
rows, 10 epochs, gamma 0.99, lambda 0.95, clip 0.2, entropy 0.01, [64, 64] tanh, 16 env
copies), for the env steps that IPPO trains its expert for
(`apps.multi_agent_datasets.DEFAULT_IPPO_ENV_STEPS`, 400,000) unless told otherwise:

* `spread-ippo`: one module every agent shares, each agent's value on its own observation;
* `spread-mappo`: the same with `centralized_value=True` (the value reads the env's
  `state()`, the three observations concatenated, 54 numbers);
* `listener-ippo`: speaker-listener with two modules, `speaker` (Discrete(3)) and
  `listener` (Discrete(5)), trained in one compiled update; `listener-mappo`: the same
  with `centralized_value=True` (the env's `state()`, 14 numbers).

Every `eval_every` iterations the greedy modules play 64 evaluation episodes. Team return =
the sum over agents and the 25 steps. Anchors measured here: simple_spread random -82.4,
heuristic -27.9; speaker-listener random -84.0, heuristic -19.7. Prints one JSON line per
evaluation and a summary per run (the level: the mean of the last three evaluations). Runs
one after the other; needs the `[multiagent]` extra.

    PYTHONPATH=. python benchmarks/mappo_vs_ippo.py [RUNS] [ENV_STEPS] [SEEDS] [EVAL_EVERY]

RUNS: comma-separated (default `spread-ippo,spread-mappo,listener-ippo`); SEEDS:
comma-separated (default `0`); EVAL_EVERY: iterations (default 25, every 50,000 env steps).
"""

from __future__ import annotations

import json
import sys
import time

from rljax_offline.apps.multi_agent_datasets import DEFAULT_IPPO_ENV_STEPS, ENVS
from rljax_offline.apps.multi_agent_ippo import ippo_config

ANCHORS = {"spread": {"random": -82.4, "heuristic": -27.9},
           "listener": {"random": -84.0, "heuristic": -19.7}}


def run_config(run: str, seed: int):
    """The config of one run (see the module docstring)."""
    config = ippo_config("simple_spread", seed)
    if run == "spread-ippo":
        return config
    if run == "spread-mappo":
        return config.training(centralized_value=True)
    if run in ("listener-ippo", "listener-mappo"):
        spec = ENVS["simple_speaker_listener"]
        mapping = dict(spec.agent_to_module)
        config = (config.environment(f"{spec.env_id}:parallel_env",
                                     env_config=dict(spec.kwargs))
                  .multi_agent(policies=set(mapping.values()), policy_mapping_fn=mapping))
        return config.training(centralized_value=run == "listener-mappo")
    raise SystemExit(f"unknown run {run!r}")


def normalised(run: str, value: float) -> float:
    anchors = ANCHORS[run.split("-")[0]]
    return 100 * (value - anchors["random"]) / (anchors["heuristic"] - anchors["random"])


def one_run(run: str, seed: int, env_steps: int, eval_every: int) -> dict:
    config = run_config(run, seed).evaluation(evaluation_interval=eval_every,
                                              evaluation_duration=64, evaluation_num_envs=16)
    algo = config.build()
    t0 = time.perf_counter()
    evaluations = []
    try:
        while algo.env_steps_sampled < env_steps:
            r = algo.train()
            if "evaluation" not in r:
                continue
            value = r["evaluation"]["env_runners"]["episode_return_mean"]
            row = {"run": run, "seed": seed, "iteration": r["training_iteration"],
                   "env_steps": r["num_env_steps_sampled_lifetime"],
                   "minutes": round((time.perf_counter() - t0) / 60, 2),
                   "sampling_return": round(r["env_runners"]["episode_return_mean"], 2),
                   "evaluation_return": round(value, 2),
                   "normalised": round(normalised(run, value), 1)}
            evaluations.append(row)
            print(json.dumps(row), flush=True)
    finally:
        algo.stop()
    level = sum(e["evaluation_return"] for e in evaluations[-3:]) / max(
        len(evaluations[-3:]), 1)
    summary = {"run": run, "seed": seed, "class": type(algo).__name__,
               "env_steps": algo.env_steps_sampled,
               "minutes": round((time.perf_counter() - t0) / 60, 1),
               "level_last_three": round(level, 2),
               "level_normalised": round(normalised(run, level), 1),
               "best": max((e["evaluation_return"] for e in evaluations), default=None)}
    print(json.dumps(summary), flush=True)
    return summary


def main() -> None:
    runs = (sys.argv[1] if len(sys.argv) > 1 else "spread-ippo,spread-mappo,listener-ippo")
    env_steps = int(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_IPPO_ENV_STEPS
    seeds = [int(s) for s in (sys.argv[3] if len(sys.argv) > 3 else "0").split(",")]
    eval_every = int(sys.argv[4]) if len(sys.argv) > 4 else 25
    summaries = [one_run(run, seed, env_steps, eval_every)
                 for seed in seeds for run in runs.split(",")]
    print(json.dumps({"benchmark": "mappo_vs_ippo", "runs": summaries}))


if __name__ == "__main__":
    main()
