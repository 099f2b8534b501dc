"""Benchmark of the offline RL algorithms (BC, MARWIL, CQL, IQL; Discrete and Box):

1. updates/s of the learner core (`DataParallel.scan_on_device`, one device) at batch 256 and
   1024, against a bare hand-written jitted `lax.scan` of the same loss functions and
   optimizers (no masks, no reductions, no target machinery beyond a Polyak line): the core's
   overhead is the ratio (aim >= 0.8x). Networks are 256x256 (d3rlpy's default encoder).
   d3rlpy 2.8 figures from issue 10 (batch 256, another run) are printed labelled as quoted,
   with their source, and are in no ratio: `benchmarks/d3rlpy_compare.py` measures d3rlpy
   and ours side by side in one command (d3rlpy in its own interpreter; never a dependency).
2. wall time to a return on the mixed-quality data sets (`rljax_offline.apps.recipes`), from the
   Parquet files, training and evaluation included.

    python benchmarks/algorithms.py [--only cql-box,iql-discrete] [--skip-wall] [--updates 200]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from rljax_offline import BCConfig, CQLConfig, IQLConfig, MARWILConfig
from rljax_offline import spaces as sp
from rljax_offline.apps.recipes import RECIPES, record_mixed
from rljax_offline.learning.data_parallel import DataParallel, select_devices
from rljax_offline.learning.init import init_state
from rljax_offline.learning.update import BatchAxis

MODEL = {"fcnet_hiddens": [256, 256]}
CARTPOLE = (gym.spaces.Box(-5, 5, (4,), np.float32), gym.spaces.Discrete(2))
PENDULUM = (gym.spaces.Box(-8, 8, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32))
# Quoted, not measured here: d3rlpy 2.8 updates/s at batch 256, one thread, on a 2-core CPU,
# typed in from issue 10. Printed for context beside ours; no ratio is taken against them.
D3RLPY_QUOTED_SOURCE = ("issue 10 (d3rlpy 2.8, batch 256, another run on a 2-core CPU); quoted, "
                        "not measured by this command: see benchmarks/d3rlpy_compare.py")
D3RLPY_256 = {"cql-box": 6.5, "iql-box": 47.0, "cql-discrete": 90.0, "bc-discrete": 130.0}

CASES = {
    "bc-discrete": (BCConfig(), CARTPOLE),
    "marwil-discrete": (MARWILConfig(), CARTPOLE),
    "cql-discrete": (CQLConfig(), CARTPOLE),
    "cql-box": (CQLConfig().training(bc_iters=0), PENDULUM),
    "iql-discrete": (IQLConfig(), CARTPOLE),
    "iql-box": (IQLConfig(), PENDULUM),
}

# (recipe, config, target return) for the wall-time part.
WALL = {
    "bc-discrete": ("cartpole-mixed", BCConfig().training(lr=1e-3), 400.0),
    "marwil-discrete": ("cartpole-mixed", MARWILConfig().training(lr=1e-3, beta=1.0), 400.0),
    "cql-discrete": ("cartpole-mixed", CQLConfig().training(critic_lr=3e-4,
                                                            target_network_update_freq=500),
                     400.0),
    "iql-discrete": ("cartpole-mixed", IQLConfig().training(
        beta=10.0, expectile=0.9, tau=0.005, critic_lr=1e-3, value_lr=1e-3), 400.0),
    "cql-box": ("pendulum-mixed", CQLConfig().training(bc_iters=200, actor_lr=1e-3), -300.0),
    "iql-box": ("pendulum-mixed", IQLConfig().training(
        beta=10.0, expectile=0.9, tau=0.005, actor_lr=1e-3, critic_lr=1e-3, value_lr=1e-3,
        actor_squashed=False), -300.0),
}


def random_data(columns, spaces, n, seed=0):
    """Random learner columns (values do not change the cost of an update)."""
    obs_space, act_space = spaces
    rng = np.random.default_rng(seed)
    obs = lambda: rng.normal(size=(n, *obs_space.shape)).astype(np.float32)  # noqa: E731
    actions = (rng.integers(0, act_space.n, n) if isinstance(act_space, gym.spaces.Discrete)
               else rng.uniform(-2, 2, (n, *act_space.shape)).astype(np.float32))
    make = {"obs": obs, "new_obs": obs, "bootstrap_obs": obs, "actions": lambda: actions,
            "rewards": lambda: rng.normal(size=n).astype(np.float32),
            "terminateds": lambda: rng.random(n) < 0.05,
            "returns_to_go": lambda: rng.random(n).astype(np.float32),
            "bootstrap_discount": lambda: np.zeros(n, np.float32)}
    return {c: jnp.asarray(make[c]()) for c in columns}


def bare_loop(learner, batch_size: int, num_updates: int):
    """The same losses and optimizers in a plain jitted scan: what the core costs is the
    difference."""

    def run(state, data):
        params, opt_states, extra, rng = state
        n = data["obs"].shape[0]

        def body(carry, _):
            params, opt_states, extra, rng = carry
            rng, k_idx, k_ex = jax.random.split(rng, 3)
            idx = jax.random.randint(k_idx, (batch_size,), 0, n)
            batch = {k: v[idx] for k, v in data.items()}
            batch["loss_mask"] = jnp.ones(batch_size, jnp.float32)
            keys = jax.random.split(k_ex, batch_size)
            if learner.prepare is not None:
                batch, extra = learner.prepare(params, extra, batch, keys, BatchAxis())
            opt_states = dict(opt_states)
            for loss in learner.losses:
                sub = {k: params[k] for k in loss.networks}
                grads = jax.grad(lambda s, loss=loss, p=params: jnp.mean(
                    loss.fn({**p, **s}, batch, keys, BatchAxis())[0]))(sub)
                updates, opt_states[loss.name] = loss.optimizer.update(
                    grads, opt_states[loss.name], sub)
                params = {**params, **optax.apply_updates(sub, updates)}
            for target, online in learner.targets.items():
                params[target] = jax.tree_util.tree_map(
                    lambda o, t: learner.tau * o + (1 - learner.tau) * t, params[online],
                    params[target])
            return (params, opt_states, extra, rng), None

        return lax.scan(body, (params, opt_states, extra, rng), None, length=num_updates)[0]

    return jax.jit(run)


def timed(fn, state, data, repeats):
    state = fn(state, data)  # compile + warm up
    jax.block_until_ready(state)
    t0 = time.perf_counter()
    for _ in range(repeats):
        state = fn(state, data)
    jax.block_until_ready(state)
    return time.perf_counter() - t0


def throughput(name, batch_size, num_updates, repeats=2):
    config, spaces = CASES[name]
    spec = config.rl_module(model_config=MODEL).make_spec(
        sp.to_spec(spaces[0]), sp.to_spec(spaces[1]))
    learner = spec.learning
    data = random_data(spec.data.columns, spaces, 20_000)
    dp = DataParallel(learner, select_devices(1), batch_size)
    scan = dp.scan_on_device(num_updates)
    state = dp.put_replicated(init_state(learner, 0))
    core_s = timed(lambda s, d: scan(s, d)[0], state, dp.put_replicated(data), repeats)
    fresh = init_state(learner, 0)
    bare = bare_loop(learner, batch_size, num_updates)
    bare_s = timed(bare, (fresh.params, fresh.opt_states, fresh.extra, fresh.rng), data,
                   repeats)
    return {"core_updates_per_s": num_updates * repeats / core_s,
            "bare_updates_per_s": num_updates * repeats / bare_s}


def wall_time_to_return(name, max_iterations=40, updates=500):
    recipe, config, target = WALL[name]
    path = os.path.join(tempfile.gettempdir(), "rljax_offline_bench", recipe)
    if not os.path.isdir(path):
        record_mixed(recipe, path)
    t0 = time.perf_counter()
    algo = (config.environment(RECIPES[recipe].env_id).offline_data(input_=path)
            .training(num_updates_per_iteration=updates)
            .rl_module(model_config=MODEL).learners(num_devices=1)
            .evaluation(evaluation_interval=1, evaluation_duration=10)).build()
    best = -np.inf
    for it in range(1, max_iterations + 1):
        ret = algo.train()["evaluation"]["env_runners"]["episode_return_mean"]
        best = max(best, ret)
        if ret >= target:
            return {"recipe": recipe, "target": target, "seconds": time.perf_counter() - t0,
                    "updates": it * updates, "reached": True}
    return {"recipe": recipe, "target": target, "seconds": time.perf_counter() - t0,
            "updates": max_iterations * updates, "reached": False, "best": best}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=",".join(CASES))
    ap.add_argument("--updates", type=int, default=200, help="updates per timed scan")
    ap.add_argument("--skip-wall", action="store_true")
    ap.add_argument("--max-iterations", type=int, default=40)
    args = ap.parse_args()
    for name in args.only.split(","):
        row = {"algorithm": name}
        for b in (256, 1024):
            r = throughput(name, b, args.updates)
            row[f"updates_per_s@{b}"] = round(r["core_updates_per_s"], 1)
            row[f"bare_updates_per_s@{b}"] = round(r["bare_updates_per_s"], 1)
            row[f"core_vs_bare@{b}"] = round(r["core_updates_per_s"] / r["bare_updates_per_s"],
                                             2)
        if name in D3RLPY_256:
            row["d3rlpy_quoted@256"] = {"updates_per_s": D3RLPY_256[name],
                                        "source": D3RLPY_QUOTED_SOURCE}
        if not args.skip_wall and name in WALL:
            row["wall_time_to_return"] = wall_time_to_return(name, args.max_iterations)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
