"""One offline training run, ours or d3rlpy's, on a directory of our Parquet episodes, evaluated
the same way for both: the core of `d3rlpy_compare.py` and `mujoco.py`.

A run trains for `updates` updates in `evals` equal parts (a tenth each by default) and after
each part evaluates the greedy policy on `eval_episodes` episodes of the env. Its history:

    {"library", "algo", "seed", "batch_size", "updates": [per part, cumulative],
     "returns": [mean return of each evaluation], "step_s_per_part": [mean s per update],
     "updates_per_s": float, "wall_s": float}

`updates_per_s` is reduced the same way for both libraries from each part's mean time per
update, evaluation excluded (ours: the learner's `learner_update_timer`; d3rlpy: its
`time_step`), leaving the first part out (ours compiles in it). Each evaluation prints one
progress line on stderr (`[ours] ...`, `[d3rlpy] ...`): a run takes minutes to hours.
`level(history)` is what to compare at the same number of updates: the mean of the last three
evaluations (never the best single one, which is noise). `plot_runs` draws evaluations over
updates, each seed a thin line and the mean over seeds thick, one colour per label.

d3rlpy runs at its defaults in its own interpreter (`_d3rlpy_worker.py`; never our
dependency): Box actions scaled to the env's bounds with `MinMaxActionScaler`, TD3+BC with its
standard observation scaler (as its paper and d3rlpy's reproduction).

Example (ours and d3rlpy's IQL on the same data, 2 seeds, D4RL-style normalized):

    # run as a script in benchmarks/, whose folder is on sys.path
    from _offline_runs import run_ours, run_d3rlpy, level, plot_runs, normalizer
    norm = normalizer(ref_min=-1200.0, ref_max=-150.0)
    ours = [run_ours("/data/pendulum", "Pendulum-v1", IQLConfig(), 20000, s) for s in (0, 1)]
    theirs = [run_d3rlpy("/venv/bin/python", "/data/pendulum", "Pendulum-v1", "IQL", 20000, s)
              for s in (0, 1)]
    print(level(ours[0], norm), level(theirs[0], norm))
    plot_runs({"ours IQL": ours, "d3rlpy IQL": theirs}, "iql.png", normalize=norm)
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import deque
from collections.abc import Callable

import numpy as np

from _paired_eval import (paired_returns, paired_returns_in_context, print_progress,
                          settings_args)

from rljax_offline.data import read_episodes
from rljax_offline.ope.data import raw_columns

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_d3rlpy_worker.py")
CORL_WORKER = os.path.join(os.path.dirname(WORKER), "_corl_edac_worker.py")
CACHE = os.path.join(tempfile.gettempdir(), "rljax_offline_bench")
# d3rlpy 2.8's default batch sizes: ours runs with the same, so an update is the same work.
D3RLPY_BATCH = {"DiscreteBC": 100, "BC": 100, "DiscreteCQL": 32, "CQL": 256, "IQL": 256,
                "TD3PlusBC": 256, "AWAC": 1024, "CRR": 100, "ReBRAC": 1024, "CalQL": 256,
                "BCQ": 100, "DiscreteBCQ": 32, "PLAS": 100, "BEAR": 256,
                # sequences on d3rlpy's side, timesteps on ours: each side at its default
                # (ours: d3rlpy's 64 / 128 sequences of context_size 20)
                "DecisionTransformer": None, "DiscreteDecisionTransformer": None}
LEVEL_EVALS = 3  # a run's level: the mean of its last evaluations


def normalizer(ref_min: float | None = None, ref_max: float | None = None
               ) -> Callable[[float], float] | None:
    """D4RL's normalized score, `100 * (r - ref_min) / (ref_max - ref_min)`; None (raw
    returns) when no references are given."""
    if ref_min is None or ref_max is None:
        return None
    span = float(ref_max) - float(ref_min)
    return lambda r: 100.0 * (float(r) - float(ref_min)) / span


def _scores(history: dict, normalize: Callable | None) -> list[float]:
    return [normalize(r) if normalize else float(r) for r in history["returns"]]


def level(history: dict, normalize: Callable | None = None, n: int = LEVEL_EVALS) -> float:
    """The mean of the run's last `n` evaluations (normalized when `normalize` is given)."""
    return float(np.mean(_scores(history, normalize)[-n:]))


def best(history: dict, normalize: Callable | None = None) -> float:
    """The best single evaluation: for information only (one evaluation is noise)."""
    return float(max(_scores(history, normalize)))


def updates_per_s(step_s_per_part: list[float]) -> float:
    """1 / the mean per-update time over the parts after the first (ours compiles in it)."""
    parts = step_s_per_part[1:] or step_s_per_part
    return len(parts) / sum(parts)


def summary(histories: list[dict], normalize: Callable | None = None) -> dict:
    """Level mean and std over seeds, best single evaluation, mean updates/s; where every
    run has its paired final evaluation, its mean over all seeds' episodes (`final_mean`;
    `d3rlpy_compare.paired_difference` compares two libraries' on their seeds' spread)."""
    levels = [level(h, normalize) for h in histories]
    out = {"level_mean": float(np.mean(levels)), "level_std": float(np.std(levels)),
           "levels": levels, "best": max(best(h, normalize) for h in histories),
           "updates_per_s": float(np.mean([h["updates_per_s"] for h in histories])),
           "seeds": [h["seed"] for h in histories], "updates": histories[0]["updates"][-1]}
    if all(h.get("final_returns") for h in histories):
        final = np.concatenate([[normalize(r) if normalize else r for r in h["final_returns"]]
                                for h in histories])
        out["final_mean"] = float(np.mean(final))
    return out


# ---------------------------------------------------------------------------- ours


def paired_difference(ours: list[dict], theirs: list[dict]) -> dict:
    """Ours - d3rlpy on the paired final evaluation: the difference of the two sides' means
    over seeds of each run's mean final return, and its standard error from the seeds' spread
    on each side (Welch's). Every run is evaluated on the same start states, so their spread
    is not in the difference: what is left is the seeds'. Empty when a run has no final
    evaluation or the episode counts differ."""
    runs = ours + theirs
    n = {len(h.get("final_returns") or ()) for h in runs}
    if len(n) != 1 or 0 in n:
        return {}
    per_seed = [np.array([np.mean(h["final_returns"]) for h in hs]) for hs in (ours, theirs)]
    var = [x.var(ddof=1) / len(x) if len(x) > 1 else np.nan for x in per_seed]
    return {"final_diff": float(per_seed[0].mean() - per_seed[1].mean()),
            "final_diff_se": float(np.sqrt(sum(var))), "final_episodes": n.pop()}


def run_ours(data: str, env_id: str, config, updates: int, seed: int, *, evals: int = 10,
             eval_episodes: int = 10, batch_size: int | None = None,
             final_episodes: int = 0) -> dict:
    """Trains `config` (an AlgorithmConfig; its settings kept, batch size overridden when
    given) on the episodes under `data` and evaluates its greedy policy after each part;
    `final_episodes`: then on that many episodes of `_paired_eval` (the same start states
    as d3rlpy's run)."""
    per_part = max(updates // evals, 1)
    training = {"num_updates_per_iteration": per_part}
    if batch_size is not None:
        training["train_batch_size_per_learner"] = batch_size
    config = (config.environment(env_id).offline_data(input_=data)
              .training(**training).learners(num_devices=1)
              .evaluation(evaluation_interval=1, evaluation_duration=eval_episodes,
                          evaluation_explore=False)
              .debugging(seed=seed))
    algo = config.build()
    t0 = time.perf_counter()
    returns, step_s = [], []
    try:
        for _ in range(evals):
            result = algo.train()
            step_s.append(result["learners"]["__all_modules__"]["learner_update_timer"])
            returns.append(float(result["evaluation"]["env_runners"]["episode_return_mean"]))
            print_progress("[ours]", config.algo_name, seed, per_part * len(returns),
                           per_part * evals, returns[-1], time.perf_counter() - t0)
        wall_s = time.perf_counter() - t0
        final = (_in_context(algo, env_id, final_episodes) if algo.is_stateful else
                 paired_returns(env_id, lambda obs: algo.compute_actions(obs, explore=False),
                                final_episodes))
    finally:
        algo.stop()
    return {"library": "rljax_offline", "algo": config.algo_name, "seed": seed,
            "batch_size": config.train_batch_size_per_learner,
            "updates": [per_part * (i + 1) for i in range(evals)], "returns": returns,
            "step_s_per_part": step_s, "updates_per_s": updates_per_s(step_s),
            "wall_s": wall_s, "device": str(algo.devices[0]),
            **({"final_returns": final} if final else {})}


def _in_context(algo, env_id: str, episodes: int) -> list[float]:
    """The paired final evaluation of a policy that carries a state (Decision Transformer's
    context): our actor, one env, driven step by step on `_paired_eval`'s episodes."""
    actor = algo.actor(explore=False)
    first = [True]

    def start():
        first[0] = True

    def act(obs, reward):
        if first[0]:
            actor.reset(obs, algo.config.seed)
            first[0] = False
        else:
            actor.observe(np.array([reward], np.float32), obs, np.zeros(1, bool))
        return actor.select()[0]

    return paired_returns_in_context(env_id, start, act, episodes)


# ---------------------------------------------------------------------------- d3rlpy


def transitions_npz(data: str) -> str:
    """The episodes under `data` as d3rlpy's `MDPDataset` arrays, cached by path (each
    episode's last observation, which has no action, is left out; its end is a terminal or a
    timeout as the episode says), and each row's `next_observations` (CORL's EDAC reads
    D4RL's `qlearning_dataset` names: the same rows, with their true next observations)."""
    key = hashlib.sha1(os.path.abspath(data).encode()).hexdigest()[:12]
    name = f"{os.path.basename(os.path.normpath(data))}-{key}-next.npz"
    out = os.path.join(CACHE, name)
    if os.path.exists(out):
        return out
    cols, lengths = raw_columns(read_episodes(data))  # OPE's columns: the same rows
    last = np.zeros(len(cols["rewards"]), np.float32)
    last[np.cumsum(lengths) - 1] = 1.0
    term = np.asarray(cols["terminateds"], np.float32)  # 1 on a terminated episode's last
    os.makedirs(CACHE, exist_ok=True)
    tmp = out + f".{os.getpid()}.npz"
    np.savez(tmp, observations=np.asarray(cols["obs"], np.float32), actions=cols["actions"],
             rewards=cols["rewards"], terminals=term, timeouts=last * (1.0 - term),
             next_observations=np.asarray(cols["new_obs"], np.float32))
    os.replace(tmp, out)
    return out


def _run_worker(cmd: list[str], threads: int, tag: str) -> dict:
    """Runs a reference library's worker with `threads` torch threads (0: torch's default)
    and returns the JSON of its last stdout line; its progress lines (stderr lines that start
    with `tag`) are shown as they come, the rest of its stderr only when it fails."""
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    with tempfile.TemporaryFile("w+") as stdout:
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, env=env)
        tail: deque[str] = deque(maxlen=60)
        for line in proc.stderr:
            if line.startswith(tag):
                print(line, end="", file=sys.stderr, flush=True)
            else:
                tail.append(line)
        if proc.wait() != 0:
            raise RuntimeError(f"worker failed ({' '.join(cmd)}):\n{''.join(tail)}")
        stdout.seek(0)
        return json.loads(stdout.read().strip().splitlines()[-1])


def _worker_history(out: dict, algo: str, seed: int, evals: int) -> dict:
    """A worker's JSON as a run's history, reduced as ours (`updates_per_s`)."""
    per_part = out["updates"] // evals
    return {"library": out["library"], "algo": algo, "seed": seed,
            "batch_size": out["batch_size"],
            "updates": [per_part * (i + 1) for i in range(evals)], "returns": out["returns"],
            "step_s_per_part": out["step_s_per_part"],
            "updates_per_s": updates_per_s(out["step_s_per_part"]), "wall_s": out["wall_s"],
            **({"final_returns": out["final_returns"]} if out.get("final_returns") else {})}


def check_d3rlpy_env(python: str, env_id: str) -> None:
    """Exit at once, naming the fix, when d3rlpy's interpreter cannot make `env_id`: its
    worker would fail only after loading the data (a venv with d3rlpy alone has no MuJoCo)."""
    done = subprocess.run([python, "-c", f"import gymnasium; gymnasium.make({env_id!r}).close()"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        fix = " (MuJoCo envs: pip install mujoco imageio there)" if "mujoco" in last.lower() else ""
        raise SystemExit(f"d3rlpy's interpreter {python} cannot make {env_id}: {last}{fix}")


def run_d3rlpy(python: str, data: str, env_id: str, algo: str, updates: int, seed: int, *,
               evals: int = 10, eval_episodes: int = 10, batch_size: int | None = None,
               threads: int = 1, overrides: dict | None = None, final_episodes: int = 0,
               init: str = "torch", target_return: float | None = None,
               greedy: bool = False, device: str = "cpu:0") -> dict:
    """d3rlpy's `algo` (a key of `D3RLPY_BATCH`) at its defaults on the same episodes, in the
    interpreter `python`, evaluated greedily after each part. `threads`: torch's threads
    (0: torch's default; on this shared 2-core CPU its default ran BC at 7.9 updates/s, one
    thread at ~250). `overrides`: config fields away from d3rlpy's defaults, for a diagnosis
    only; `init="flax"` draws its layers as flax does (a diagnosis too). `target_return`:
    what a Decision Transformer acts towards (ours: its config's). `greedy`: act with the
    policy's mean where d3rlpy's `predict` does otherwise (CRR), a diagnosis. `device`: torch's
    device for d3rlpy (ours runs where JAX's default backend is)."""
    cmd = [python, WORKER, "--data", transitions_npz(data), "--algo", algo, "--env", env_id,
           "--updates", str(updates), "--evals", str(evals),
           "--eval-episodes", str(eval_episodes), "--seed", str(seed),
           "--final-episodes", str(final_episodes), "--init", init, "--device", device]
    if batch_size is not None:
        cmd += ["--batch-size", str(batch_size)]
    if target_return is not None:
        cmd += ["--target-return", str(target_return)]
    if greedy:
        cmd += ["--greedy"]
    cmd += settings_args(overrides)
    out = _run_worker(cmd, threads, "[d3rlpy]")
    return {**_worker_history(out, algo, seed, evals),
            "overrides": overrides or {}, "greedy": greedy, "device": device}


# ---------------------------------------------------------------------------- plots


def plot_runs(runs: dict[str, list[dict]], path: str, *, title: str = "",
              normalize: Callable | None = None) -> str:
    """Evaluations over updates to PNG at `path`: per label (e.g. "ours IQL", "d3rlpy IQL")
    each seed a thin line, the mean over seeds a thick one."""
    import matplotlib  # benchmark-only dependency, loaded only when a plot is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, (label, histories) in enumerate(runs.items()):
        color = f"C{i}"
        for h in histories:
            ax.plot(h["updates"], _scores(h, normalize), color=color, lw=0.7, alpha=0.45)
        n = min(len(h["returns"]) for h in histories)
        mean = np.mean([_scores(h, normalize)[:n] for h in histories], axis=0)
        ax.plot(histories[0]["updates"][:n], mean, color=color, lw=2.4,
                label=f"{label} ({len(histories)} seeds)")
    ax.set_xlabel("updates")
    ax.set_ylabel("normalized score" if normalize else "evaluation return (mean of the episodes)")
    ax.set_title("\n".join(textwrap.wrap(title, 64)), fontsize=10)  # long case names wrap
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------- CORL


def run_corl_edac(python: str, corl_file: str, data: str, env_id: str, updates: int,
                  seed: int, *, evals: int = 10, eval_episodes: int = 10,
                  settings: dict | None = None, final_episodes: int = 0,
                  threads: int = 1) -> dict:
    """CORL's EDAC (`corl_file`: its `algorithms/offline/edac.py`, run unchanged by
    `_corl_edac_worker.py` in the interpreter `python`, which has PyTorch) on the same rows as
    ours, evaluated as `run_d3rlpy`'s runs are. `settings`: its `TrainConfig` fields away
    from CORL's defaults (e.g. `{"num_critics": 50}`, its hopper-medium-v2 file)."""
    cmd = [python, CORL_WORKER, "--corl-file", corl_file, "--data", transitions_npz(data),
           "--env", env_id, "--updates", str(updates), "--evals", str(evals),
           "--eval-episodes", str(eval_episodes), "--seed", str(seed),
           "--final-episodes", str(final_episodes)]
    cmd += settings_args(settings)
    out = _run_worker(cmd, threads, "[corl]")
    return {**_worker_history(out, "EDAC", seed, evals), "settings": out["settings"]}
