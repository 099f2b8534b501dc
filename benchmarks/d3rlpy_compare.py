"""rljax_offline against d3rlpy 2.8 on the same data, in the same command.

For each case both libraries train on the same recording (`rljax_offline.apps.recipes`' mixed
CartPole and Pendulum recipes, read from our Parquet; d3rlpy gets the same transitions as an
`MDPDataset`) with the same batch size and number of updates, and both evaluate the greedy
policy in the env after each fifth of the updates. d3rlpy runs at its defaults, with Box
actions scaled to the env's bounds (`MinMaxActionScaler`), as a fair comparison needs; ours
runs at RLlib's defaults except the few settings each case lists (printed with the row).

Printed per case: updates/s of each, reduced the same way for both from each part's mean time
per update (ours from the learner's timer, d3rlpy's from its own `time_step`; evaluation
excluded): `steady` leaves the first part out for both (ours compiles in it), `all` keeps every
part for both; their ratios, each run's level (the mean of its last three evaluations: what
to compare, at the same number of updates) and its final and best returns.

d3rlpy is never our dependency: it runs in the interpreter given by `--d3rlpy-python` (or
`$D3RLPY_PYTHON`, or this one when it can import d3rlpy), through `_d3rlpy_worker.py`:

    python -m venv /tmp/d3 && /tmp/d3/bin/pip install d3rlpy==2.8.1
    python benchmarks/d3rlpy_compare.py --d3rlpy-python /tmp/d3/bin/python [--only cql-cartpole]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from typing import NamedTuple

import numpy as np

from rljax_offline import BCConfig, CQLConfig, IQLConfig
from rljax_offline.algorithms.td3_bc import TD3BCConfig
from rljax_offline.data import read_episodes
from rljax_offline.apps.recipes import RECIPES, record_mixed

CACHE = os.path.join(tempfile.gettempdir(), "rljax_offline_bench")
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_d3rlpy_worker.py")
# d3rlpy 2.8's default batch sizes: ours uses the same, so an update is the same work.
D3RLPY_BATCH = {"DiscreteBC": 100, "BC": 100, "DiscreteCQL": 32, "CQL": 256, "IQL": 256,
                "TD3PlusBC": 256}


class Case(NamedTuple):
    recipe: str
    d3rlpy_algo: str
    ours: object  # an AlgorithmConfig
    ours_changes: dict  # our settings that differ from RLlib's defaults (printed)
    updates: int


IQL_CHANGES = {"beta": 10.0, "expectile": 0.9, "critic_lr": 1e-3, "value_lr": 1e-3,
               "actor_lr": 1e-3, "tau": 0.005}
CASES = {
    "bc-cartpole": Case("cartpole-mixed", "DiscreteBC", BCConfig(), {"lr": 1e-3}, 2000),
    "cql-cartpole": Case("cartpole-mixed", "DiscreteCQL", CQLConfig(),
                         {"target_network_update_freq": 500}, 10000),
    "bc-pendulum": Case("pendulum-mixed", "BC", BCConfig(), {"lr": 1e-3}, 2000),
    "iql-pendulum": Case("pendulum-mixed", "IQL", IQLConfig(),
                         {**IQL_CHANGES, "actor_squashed": False}, 2000),
    "cql-pendulum": Case("pendulum-mixed", "CQL", CQLConfig(),
                         {"bc_iters": 200, "actor_lr": 1e-3}, 1000),
    # TD3+BC's defaults are d3rlpy's (RLlib has none): nothing to change.
    "td3bc-pendulum": Case("pendulum-mixed", "TD3PlusBC", TD3BCConfig(), {}, 20000),
}
LEVEL_EVALS = 3  # a run's level: the mean of its last evaluations, never the best one


def recording(recipe: str) -> str:
    path = os.path.join(CACHE, recipe)
    if not os.path.isdir(path):
        record_mixed(recipe, path)
    return path


def transitions_npz(recipe: str) -> str:
    """The recording as d3rlpy's MDPDataset arrays (each episode's last observation, which
    has no action, is left out; its end is a terminal or a timeout)."""
    out = os.path.join(CACHE, f"{recipe}.npz")
    if os.path.exists(out):
        return out
    obs, act, rew, term, tout = [], [], [], [], []
    for ep in read_episodes(recording(recipe)):
        n = len(ep)
        obs.append(np.asarray(ep.get_observations(slice(0, n))))
        act.append(np.asarray(ep.get_actions()))
        rew.append(np.asarray(ep.get_rewards(), np.float32))
        end = np.zeros(n, np.float32)
        end[-1] = 1.0
        term.append(end * ep.is_terminated)
        tout.append(end * (not ep.is_terminated))
    np.savez(out, observations=np.concatenate(obs).astype(np.float32),
             actions=np.concatenate(act), rewards=np.concatenate(rew),
             terminals=np.concatenate(term), timeouts=np.concatenate(tout))
    return out


def run_ours(case: Case, evals: int, eval_episodes: int, seed: int) -> dict:
    per_eval = case.updates // evals
    config = (case.ours.environment(RECIPES[case.recipe].env_id)
              .offline_data(input_=recording(case.recipe))
              .training(train_batch_size_per_learner=D3RLPY_BATCH[case.d3rlpy_algo],
                        num_updates_per_iteration=per_eval, **case.ours_changes)
              .learners(num_devices=1)
              .evaluation(evaluation_interval=1, evaluation_duration=eval_episodes)
              .debugging(seed=seed))
    algo = config.build()
    returns, step_s = [], []
    for _ in range(evals):
        result = algo.train()
        step_s.append(result["learners"]["__all_modules__"]["learner_update_timer"])
        returns.append(result["evaluation"]["env_runners"]["episode_return_mean"])
    algo.stop()
    return {"library": "rljax_offline", "updates": per_eval * evals,
            "step_s_per_part": step_s, "returns": returns}


def updates_per_s(step_s_per_part: list[float]) -> dict:
    """The same reduction for both libraries: 1 / the mean per-update time of the parts,
    without the first part (`steady`; ours compiles in it) and with every part (`all`)."""
    steady = step_s_per_part[1:] or step_s_per_part
    return {"steady": len(steady) / sum(steady),
            "all": len(step_s_per_part) / sum(step_s_per_part)}


def run_d3rlpy(python: str, case: Case, evals: int, eval_episodes: int, seed: int) -> dict:
    cmd = [python, WORKER, "--data", transitions_npz(case.recipe), "--algo", case.d3rlpy_algo,
           "--env", RECIPES[case.recipe].env_id, "--updates", str(case.updates),
           "--evals", str(evals), "--eval-episodes", str(eval_episodes), "--seed", str(seed)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"d3rlpy worker failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def d3rlpy_python(given: str | None) -> str | None:
    if given:
        return given
    if os.environ.get("D3RLPY_PYTHON"):
        return os.environ["D3RLPY_PYTHON"]
    return sys.executable if importlib.util.find_spec("d3rlpy") is not None else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(CASES), help="comma-separated cases")
    ap.add_argument("--d3rlpy-python", help="interpreter with d3rlpy 2.8 installed")
    ap.add_argument("--evals", type=int, default=5, help="evaluations per run")
    ap.add_argument("--eval-episodes", type=int, default=10)
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every update budget")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    python = d3rlpy_python(args.d3rlpy_python)
    if python is None:
        sys.exit("d3rlpy is not importable here: pass --d3rlpy-python (see the docstring)")
    rows = []
    for name in args.only.split(","):
        case = CASES[name]
        case = case._replace(updates=max(int(case.updates * args.scale), args.evals))
        ours = run_ours(case, args.evals, args.eval_episodes, args.seed)
        theirs = run_d3rlpy(python, case, args.evals, args.eval_episodes, args.seed)
        ours_rate, their_rate = (updates_per_s(ours["step_s_per_part"]),
                                 updates_per_s(theirs["step_s_per_part"]))
        row = {"case": name, "d3rlpy_algo": case.d3rlpy_algo,
               "batch_size": D3RLPY_BATCH[case.d3rlpy_algo], "updates": ours["updates"],
               "ours_changes_from_rllib_defaults": case.ours_changes,
               "ours_updates_per_s": round(ours_rate["steady"], 1),
               "d3rlpy_updates_per_s": round(their_rate["steady"], 1),
               "x_d3rlpy": round(ours_rate["steady"] / their_rate["steady"], 1),
               "ours_updates_per_s_all_parts": round(ours_rate["all"], 1),
               "d3rlpy_updates_per_s_all_parts": round(their_rate["all"], 1),
               "x_d3rlpy_all_parts": round(ours_rate["all"] / their_rate["all"], 1),
               "ours_level": round(float(np.mean(ours["returns"][-LEVEL_EVALS:])), 1),
               "d3rlpy_level": round(float(np.mean(theirs["returns"][-LEVEL_EVALS:])), 1),
               "ours_return_final": round(ours["returns"][-1], 1),
               "ours_return_best": round(max(ours["returns"]), 1),
               "d3rlpy_return_final": round(theirs["returns"][-1], 1),
               "d3rlpy_return_best": round(max(theirs["returns"]), 1),
               "d3rlpy": theirs["library"]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{'case':14} {'updates':>7} {'ours/s':>8} {'d3rlpy/s':>9} {'ratio':>6} {'all':>6} "
          f"{'ours level':>10} {'d3rlpy level':>12} "
          f"{'ours final/best':>16} {'d3rlpy final/best':>18}")
    for r in rows:
        print(f"{r['case']:14} {r['updates']:7d} {r['ours_updates_per_s']:8.1f} "
              f"{r['d3rlpy_updates_per_s']:9.1f} {r['x_d3rlpy']:5.1f}x "
              f"{r['x_d3rlpy_all_parts']:5.1f}x "
              f"{r['ours_level']:10.1f} {r['d3rlpy_level']:12.1f} "
              f"{r['ours_return_final']:7.1f}/{r['ours_return_best']:<8.1f} "
              f"{r['d3rlpy_return_final']:8.1f}/{r['d3rlpy_return_best']:<8.1f}")


if __name__ == "__main__":
    main()
