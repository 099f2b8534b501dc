"""The training loop behind `rljax-offline train` and `demo`: iterations with a progress bar,
metrics as JSON lines, early stop on a target return, a checkpoint and a learning-curve PNG."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

import jax

from rljax_offline.algorithms.config import AlgorithmConfig
from rljax_offline.plotting import main_loss, save_learning_curve


def _short(result: dict) -> dict:
    name, loss = main_loss(result["learners"]["default_policy"])
    row = {"iteration": result["training_iteration"], name: round(loss, 5),
           "time_this_iter_s": round(result["time_this_iter_s"], 3)}
    if "evaluation" in result:
        ev = result["evaluation"]["env_runners"]
        row["episode_return_mean"] = round(ev["episode_return_mean"], 2)
    return row


def run_training(config: AlgorithmConfig, *, iterations: int = 50, stop_return: float | None = None,
                 out_dir: str = "rljax_runs/bc", progress: bool = True,
                 emit: Callable[[dict], None] | None = None, resume: bool = True) -> dict:
    """Trains the config's algorithm for up to `iterations` (stopping once the evaluation
    return mean reaches `stop_return`), checkpointing to `out_dir/checkpoint` after every
    iteration, so an interrupted run resumes from its last checkpoint when started again
    with `resume=True`.

    Writes `out_dir/metrics.jsonl` and `out_dir/learning_curve.png`; returns a summary. In
    a multi-process run every process trains and process 0 alone writes.
    """
    from tqdm import tqdm

    from rljax_offline.distributed import is_writer

    os.makedirs(out_dir, exist_ok=True)
    ckpt = os.path.join(out_dir, "checkpoint")
    t0 = time.perf_counter()
    algo = config.build()
    if resume and os.path.isdir(ckpt):
        algo.restore(ckpt)
    best = None
    reached = False
    metrics_path = os.path.join(out_dir, "metrics.jsonl")
    writer = is_writer()
    with open(metrics_path if writer else os.devnull, "a") as log, tqdm(
            total=iterations, initial=algo.iteration, desc=f"{config.algo_name.upper()} training",
            disable=not (progress and writer), unit="it") as bar:
        while algo.iteration < iterations:
            result = algo.train()
            row = _short(result)
            log.write(json.dumps(result, default=float) + "\n")
            log.flush()
            if emit is not None:
                emit(row)
            bar.update(1)
            bar.set_postfix({k: v for k, v in row.items() if k != "iteration"})
            algo.save(ckpt)
            ret = row.get("episode_return_mean")
            if ret is not None:
                best = ret if best is None else max(best, ret)
                if stop_return is not None and ret >= stop_return:
                    reached = True
                    break
    plot = (save_learning_curve(algo.history, os.path.join(out_dir, "learning_curve.png"),
                                target_return=stop_return) if writer else None)
    algo.stop()
    return {"iterations": algo.iteration, "best_return": best, "reached_target": reached,
            "seconds": round(time.perf_counter() - t0, 2), "data_load_s":
            round(algo.timers.get("data_load_s", 0.0), 2), "checkpoint": ckpt,
            "metrics": metrics_path, "plot": plot, "num_devices": len(algo.devices),
            "process_index": jax.process_index(), "process_count": jax.process_count()}
