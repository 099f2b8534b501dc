"""Benchmark of off-policy evaluation (`rljax_offline.ope`): do the estimators rank policies
of different quality as their true returns do, how far off are they, and do their intervals
cover the truth?

For CartPole and Pendulum: mixed-quality data recorded with the behaviour's `action_logp`
(`apps.recipes`, the behaviour mixes of `acting.behavior`), one set to train on and one,
recorded with another seed, to evaluate on. Checkpoints of clearly different quality: on
CartPole BC, MARWIL, CQL and IQL at several points of training; on Pendulum a set chosen by
the spacing of the true returns alone (measured before any estimate was looked at; every
pair several standard errors apart): BC after 10 updates (random-like), MARWIL (worse than
random: its wide Gaussian clipped at the bounds), CQL after 3000 updates, and three policy
functions (the function API): the scripted expert with Gaussian torque noise of std 0.3, 1.0
and 3.0. The offline checkpoints left out (BC@2000, CQL@300, IQL) score within noise of the
random-like one. FQE: 8000 updates, target copied every 100 (80 backups, more than the
1 / (1 - gamma) = 50 of Pendulum's gamma 0.98; CartPole's 0.99 would want 100), bootstrapped
with 5 heads (`fqe`, `dr`) and with one head, the plain fit and the default (`fqe1`, `dr1`). For
each: the true discounted return of its stochastic policy (the policy OPE evaluates,
`explore=True`) from env episodes, with its standard error, and every estimator's
`v_target` with its 95% bootstrap interval. Printed: one table per env, then per estimator
the Spearman rank correlation with the truth, the mean relative error, how many
intervals cover the true value (within two standard errors of the env estimate), how many
the bootstrap part alone covers (FQE's interval adds its convergence bound, `ope.fqe`) and
the intervals' median width; and FQE's
updates/s, with 1 and 5 heads, against the learner core's updates/s of a plain algorithm
with the same kind of loss (discrete CQL, one Q network, same width and batch) in this
process, as ratios.

    python benchmarks/ope.py [--fqe-updates 8000] [--fqe-period 100] [--truth-episodes N]
                             [--only cartpole]
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time

import gymnasium as gym
import numpy as np

from rljax_offline import BCConfig, CQLConfig, IQLConfig, MARWILConfig
from rljax_offline.acting.experts import pendulum_expert
from rljax_offline.apps.recipes import record_mixed
from rljax_offline.data import read_episodes
from rljax_offline.ope import estimate
from rljax_offline.ope.env_value import discounted_env_value

CACHE = os.path.join(tempfile.gettempdir(), "rljax_offline_bench", "ope")
METHODS = ("is", "wis", "pdis", "wpdis", "fqe", "dr", "fqe1", "dr1")
METHOD_SPECS = {**{m: {"type": m} for m in METHODS[:4]},
                "fqe": {"type": "fqe", "bootstrap_heads": 5},
                "dr": {"type": "dr", "bootstrap_heads": 5},
                "fqe1": {"type": "fqe", "bootstrap_heads": 1},
                "dr1": {"type": "dr", "bootstrap_heads": 1}}
HIDDEN = {"fcnet_hiddens": [64, 64]}

ENVS = {
    "cartpole": dict(recipe="cartpole-mixed-small", env="CartPole-v1", train=300, eval=150,
                     gamma=0.99, truth_episodes=100),
    "pendulum": dict(recipe="pendulum-mixed-small", env="Pendulum-v1", train=60, eval=40,
                     gamma=0.98, truth_episodes=300),
}


def data(name: str, spec: dict) -> tuple[str, str]:
    paths = []
    for part, n, seed in (("train", spec["train"], 0), ("eval", spec["eval"], 1)):
        path = os.path.join(CACHE, f"{name}_{part}_{n}")
        if not os.path.isdir(path):
            record_mixed(spec["recipe"], path, num_episodes=n, seed=seed)
        paths.append(path)
    return paths[0], paths[1]


def schedules(env: str):
    """(label, config, [updates at which a checkpoint is taken])."""
    common = dict(train_batch_size_per_learner=256)
    if env == "cartpole":
        return [
            ("bc", BCConfig().training(lr=1e-3, **common), [10, 2000]),
            ("marwil", MARWILConfig().training(lr=1e-3, beta=1.0, **common), [2000]),
            ("cql", CQLConfig().training(min_q_weight=1.0, target_network_update_freq=200,
                                         **common), [300, 3000]),
            ("iql", IQLConfig().training(**common), [2000]),
        ]
    return [
        ("bc", BCConfig().training(lr=1e-3, **common), [10]),
        ("marwil", MARWILConfig().training(lr=1e-3, beta=1.0, **common), [2000]),
        ("cql", CQLConfig().training(bc_iters=200, **common), [3000]),
    ]


def noisy_experts(env: str) -> list:
    """Policy functions of known, clearly different quality (the function API's protocol):
    the scripted Pendulum expert with Gaussian noise of std 0.3, 1.0 and 3.0 on its torque:
    (label, acting callable for the truth, OPE function obs -> (mean, std))."""
    if env != "pendulum":
        return []
    out = []
    for std in (0.3, 1.0, 3.0):
        rng = np.random.default_rng(7)

        def act(obs, std=std, rng=rng):
            a = pendulum_expert(obs) + std * rng.standard_normal((len(obs), 1))
            return np.clip(a, -2.0, 2.0).astype(np.float32)

        def dist(obs, std=std):
            mean = pendulum_expert(np.asarray(obs))
            return mean, np.full_like(mean, std)

        out.append((f"expert+N{std:g}", act, dist))
    return out


def true_value(algo, env: str, gamma: float, episodes: int, seed: int) -> tuple[float, float]:
    """Mean discounted return of the stochastic policy over env episodes, and its std error.
    `algo`: an algorithm (its action distribution) or a callable `obs -> actions`."""
    policy = algo if callable(algo) else algo.actor(explore=True)
    return discounted_env_value(policy, env, gamma, episodes, seed, num_envs=10)


def spearman(x, y) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    def ranks(v):
        v = np.asarray(v, float)
        order = np.argsort(v, kind="stable")
        r = np.empty(len(v))
        r[order] = np.arange(len(v), dtype=float)
        for val in np.unique(v):
            r[v == val] = r[v == val].mean()
        return r
    a, b = ranks(x), ranks(y)
    if a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def speed(train_path: str, eval_eps: list, updates: int, rounds: int = 2
          ) -> tuple[float, float, float]:
    """(FQE updates/s with 1 head, with 5 bootstrap heads, learner core updates/s of a plain
    algorithm), measured side by side in this process, the best of `rounds` each (the
    machine is shared). The plain algorithm is discrete CQL with one Q network: a TD loss
    with a target network like FQE's, through the same core, the same width ([128, 128]) and
    batch (256), after its compile."""
    algo = (CQLConfig().environment("CartPole-v1").offline_data(input_=train_path)
            .training(train_batch_size_per_learner=256, num_updates_per_iteration=updates,
                      twin_q=False)
            .rl_module(model_config={"fcnet_hiddens": [128, 128]})
            .evaluation(evaluation_interval=0)).build()
    algo.train()
    core, fqe = [], {1: [], 5: []}
    for _ in range(rounds):
        t0 = time.perf_counter()
        algo.train()
        core.append(updates / (time.perf_counter() - t0))
        for heads in fqe:
            est = estimate(algo, eval_eps, methods=["fqe"], gamma=0.99, num_bootstrap=10,
                           fqe={"num_updates": updates + 1000, "bootstrap_heads": heads,
                                "model_config": {"fcnet_hiddens": [128, 128]}})
            fqe[heads].append(est["fqe"]["fqe_updates_per_s"])
    algo.stop()
    return max(fqe[1]), max(fqe[5]), max(core)


def run_env(name: str, args) -> tuple[list, list]:
    spec = ENVS[name]
    train_path, eval_path = data(name, spec)
    eval_eps = read_episodes(eval_path)
    truth_episodes = args.truth_episodes or spec["truth_episodes"]
    rows, fqe_rates = [], []
    for label, config, points in schedules(name):
        step = math.gcd(*points)
        built = (config.environment(spec["env"]).offline_data(input_=train_path)
                 .training(num_updates_per_iteration=step)
                 .rl_module(model_config=HIDDEN).evaluation(evaluation_interval=0)
                 .debugging(seed=0)).build()
        done = 0
        for point in points:
            while done < point:
                built.train()
                done += step
            t0 = time.perf_counter()
            truth, se = true_value(built, spec["env"], spec["gamma"], truth_episodes,
                                   seed=1000)
            est = estimate(built, eval_eps, methods=METHOD_SPECS, gamma=spec["gamma"],
                           fqe={"num_updates": args.fqe_updates,
                                "target_update_period": args.fqe_period,
                                "model_config": {"fcnet_hiddens": [128, 128]}})
            fqe_rates.append(est["fqe"]["fqe_updates_per_s"])
            rows.append((f"{label}@{point}", truth, se, est))
            print(f"  {name} {label}@{point}: true {truth:.2f} +- {se:.2f}  "
                  + "  ".join(f"{m} {est[m]['v_target']:.2f}" for m in METHODS)
                  + f"  ({time.perf_counter() - t0:.0f} s)", flush=True)
        built.stop()
    for label, act, dist in noisy_experts(name):
        truth, se = true_value(act, spec["env"], spec["gamma"], truth_episodes, seed=1000)
        env = gym.make(spec["env"])
        est = estimate(dist, eval_eps, methods=METHOD_SPECS, gamma=spec["gamma"],
                       action_space=env.action_space, observation_space=env.observation_space,
                       fqe={"num_updates": args.fqe_updates,
                            "target_update_period": args.fqe_period,
                            "model_config": {"fcnet_hiddens": [128, 128]}})
        env.close()
        fqe_rates.append(est["fqe"]["fqe_updates_per_s"])
        rows.append((label, truth, se, est))
        print(f"  {name} {label}: true {truth:.2f} +- {se:.2f}  "
              + "  ".join(f"{m} {est[m]['v_target']:.2f}" for m in METHODS), flush=True)
    return rows, fqe_rates


def report(name: str, rows: list) -> None:
    print(f"\n{name}: v_target [95% interval], relative error |est - true| / |true|")
    head = f"{'checkpoint':>12} {'true':>14}" + "".join(f" {m:>24}" for m in METHODS)
    print(head)
    for label, truth, se, est in rows:
        cells = "".join(
            f" {est[m]['v_target']:8.2f} [{est[m]['v_target_ci'][0]:6.1f},"
            f"{est[m]['v_target_ci'][1]:6.1f}]" for m in METHODS)
        print(f"{label:>12} {truth:8.2f}+-{se:4.2f}{cells}")
    ess = [est["is"]["ess"] for *_, est in rows]
    print(f"{'ESS':>12} {'':>14}" + " trajectory weights per checkpoint: "
          + ", ".join(f"{e:.1f}" for e in ess) + f" of {rows[0][3]['is']['num_episodes']}")
    truths = [t for _, t, _, _ in rows]
    print(f"{'estimator':>12} {'spearman':>9} {'mean rel err':>13} {'covered':>8} "
          f"{'bootstrap alone':>16} {'median width':>13}")
    for m in METHODS:
        vals = [est[m]["v_target"] for *_, est in rows]
        rel = [abs(v - t) / max(abs(t), 1e-8) for v, t in zip(vals, truths)]
        cover, boot = (sum(est[m][key][0] - 2 * se <= t <= est[m][key][1] + 2 * se
                           for (_, t, se, est) in rows)
                       for key in ("v_target_ci", "v_target_ci_bootstrap"))
        width = np.median([est[m]["v_target_ci"][1] - est[m]["v_target_ci"][0]
                           for *_, est in rows])
        print(f"{m:>12} {spearman(vals, truths):9.2f} {np.nanmean(rel):13.2f} "
              f"{cover:>4}/{len(rows)} {boot:>12}/{len(rows)} {width:13.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fqe-updates", type=int, default=8000)
    ap.add_argument("--fqe-period", type=int, default=100,
                    help="FQE's updates between target copies")
    ap.add_argument("--truth-episodes", type=int, default=0,
                    help="env episodes per true value (default: 100 CartPole, 300 Pendulum)")
    ap.add_argument("--only", default="cartpole,pendulum")
    ap.add_argument("--speed-updates", type=int, default=3000)
    args = ap.parse_args()
    t0 = time.perf_counter()
    rates = []
    results = {}
    for name in args.only.split(","):
        results[name], r = run_env(name, args)
        rates += r
    for name, rows in results.items():
        report(name, rows)
    train_path, eval_path = data("cartpole", ENVS["cartpole"])
    fqe1, fqe5, core = speed(train_path, read_episodes(eval_path), args.speed_updates)
    print(f"\nFQE fits above (5 heads): median {float(np.nanmedian(rates)):.0f} updates/s")
    print(f"side by side, best of 2: FQE {fqe1:.0f} updates/s (1 head), {fqe5:.0f} (5 "
          f"bootstrap heads), learner core (discrete CQL, one Q, [128, 128], batch 256) "
          f"{core:.0f} updates/s: ratios {fqe1 / core:.2f}x and {fqe5 / core:.2f}x; 5 heads "
          f"cost {fqe1 / fqe5:.1f}x the time of 1")
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
