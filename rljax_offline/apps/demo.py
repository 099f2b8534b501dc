"""`rljax-offline demo`: record expert CartPole data to Parquet, train BC from the files,
evaluate, print a short table and save the pictures."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable

import numpy as np

from rljax_offline.acting.env_runner import record_expert
from rljax_offline.acting.recording import record_policy
from rljax_offline.algorithms.algorithm import Algorithm
from rljax_offline.algorithms.bc import BCConfig
from rljax_offline.apps.plotting import (
    save_learning_curve,
    save_return_histogram,
    save_workflow_curves,
)
from rljax_offline.apps.training_loop import run_training
from rljax_offline.apps.workflow import (
    cartpole_bc_config,
    cartpole_ppo_config,
    train_bc_until,
    train_ppo_until,
)
from rljax_offline.data import read_episodes

TARGET = 450.0


def run_demo(out_dir: str = "demo_output", num_episodes: int = 500, seed: int = 0,
             progress: bool = True, emit: Callable[[dict], None] | None = None) -> dict:
    emit = emit or (lambda r: None)
    data = os.path.join(out_dir, "cartpole_expert")
    run_dir = os.path.join(out_dir, "bc_run")
    for d in (data, run_dir):  # a fresh demo every time
        shutil.rmtree(d, ignore_errors=True)
    t0 = time.perf_counter()
    files = record_expert("CartPole-v1", data, num_episodes=num_episodes, seed=seed,
                          progress=progress, output_max_rows_per_file=100)
    t_record = time.perf_counter() - t0
    emit({"step": "record", "episodes": num_episodes, "files": len(files),
          "seconds": round(t_record, 2)})

    config = (BCConfig()
              .environment("CartPole-v1")
              .offline_data(input_=data)
              .training(lr=1e-3, train_batch_size_per_learner=1024,
                        num_updates_per_iteration=20)
              .evaluation(evaluation_interval=1, evaluation_duration=10)
              .debugging(seed=seed))
    # Train a little past the target so the final 20-episode evaluation clears it too.
    summary = run_training(config, iterations=30, stop_return=TARGET + 25, out_dir=run_dir,
                           progress=progress, emit=emit, resume=False)

    algo = Algorithm.from_checkpoint(summary["checkpoint"])
    # The curve shows the demo's own target (training stopped a little past it), against the
    # timesteps trained on.
    save_learning_curve(algo.history, summary["plot"], target_return=TARGET, x_axis="samples")
    final = algo.evaluate(num_episodes=20)
    algo.stop()
    expert_returns = [ep.get_return() for ep in read_episodes(data)]
    hist = save_return_histogram({"expert data": expert_returns,
                                  "BC policy": final["episode_returns"]},
                                 os.path.join(out_dir, "returns.png"),
                                 title="CartPole-v1: expert vs behavior cloning")
    rows = [
        ("expert episodes recorded", f"{num_episodes} ({len(files)} Parquet files)"),
        ("expert return mean", f"{np.mean(expert_returns):.1f}"),
        ("BC iterations (20 updates each)", str(summary["iterations"])),
        ("BC evaluation return (20 episodes)",
         f"{final['episode_return_mean']:.1f} (min {final['episode_return_min']:.0f})"),
        (f"reached target {TARGET:.0f}", "yes" if final["episode_return_mean"] >= TARGET else "NO"),
        ("time: record / train+eval", f"{t_record:.1f} s / {summary['seconds']:.1f} s"),
        ("learning curve", summary["plot"]),
        ("return histogram", hist),
    ]
    width = max(len(k) for k, _ in rows)
    print("\n" + "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows) + "\n", flush=True)
    result = {"step": "demo", "final_return_mean": final["episode_return_mean"],
              "reached_target": final["episode_return_mean"] >= TARGET, **summary,
              "histogram": hist}
    emit(result)
    return result


def run_full_demo(out_dir: str = "demo_output", num_episodes: int = 500, seed: int = 0,
                  progress: bool = True, emit: Callable[[dict], None] | None = None) -> dict:
    """RLlib's whole offline-data guide: train a PPO expert to 450, checkpoint it, record
    `num_episodes` episodes with its policy, clone it with BC, fine-tune the clone with PPO;
    one figure with all curves (`workflow.png`) and a short table."""
    emit = emit or (lambda r: None)
    paths = {k: os.path.join(out_dir, k) for k in ("ppo_expert", "recorded", "bc_clone")}
    for d in paths.values():  # a fresh demo every time
        shutil.rmtree(d, ignore_errors=True)
    ppo = train_ppo_until(cartpole_ppo_config(seed), emit=emit)
    ppo.algo.save(paths["ppo_expert"])
    ppo.algo.stop()
    emit({"step": "ppo_expert", "env_steps": ppo.reached_at, "seconds": round(ppo.seconds, 2),
          "checkpoint": paths["ppo_expert"]})

    t0 = time.perf_counter()
    files = record_policy("CartPole-v1", paths["ppo_expert"], paths["recorded"],
                          num_episodes=num_episodes, seed=seed, progress=progress,
                          output_max_rows_per_file=100)
    t_record = time.perf_counter() - t0
    data_returns = [ep.get_return() for ep in read_episodes(paths["recorded"])]
    emit({"step": "record", "episodes": num_episodes, "files": len(files),
          "return_mean": float(np.mean(data_returns)), "seconds": round(t_record, 2)})

    bc = train_bc_until(cartpole_bc_config(paths["recorded"], seed), emit=emit)
    bc.algo.save(paths["bc_clone"])
    bc.algo.stop()

    tuned = train_ppo_until(cartpole_ppo_config(seed, lr=3e-4,
                                                init_policy_from=paths["bc_clone"]),
                            emit=emit, min_iterations=8)
    tuned.algo.stop()
    figure = save_workflow_curves(ppo.curve, bc.curve, tuned.curve,
                                  os.path.join(out_dir, "workflow.png"), target=TARGET,
                                  data_return=float(np.mean(data_returns)))

    def reached(run, unit):
        return f"{run.reached_at} {unit}" if run.reached_at is not None else "NOT reached"

    rows = [
        ("PPO expert: 450 after", f"{reached(ppo, 'env steps')} ({ppo.seconds:.1f} s)"),
        ("recorded from its checkpoint",
         f"{num_episodes} episodes, return mean {np.mean(data_returns):.1f} "
         f"({t_record:.1f} s)"),
        ("BC clone: 450 after", f"{reached(bc, 'updates')} ({bc.seconds:.1f} s)"),
        ("PPO fine-tuned from BC: 450 after",
         f"{reached(tuned, 'env steps')} ({tuned.seconds:.1f} s)"),
        ("figure", figure),
    ]
    width = max(len(k) for k, _ in rows)
    print("\n" + "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows) + "\n", flush=True)
    result = {"step": "demo_full", "ppo_env_steps": ppo.reached_at,
              "record_return_mean": float(np.mean(data_returns)),
              "bc_updates": bc.reached_at, "finetuned_env_steps": tuned.reached_at,
              "figure": figure, **{f"{k}_path": v for k, v in paths.items()}}
    emit(result)
    return result
