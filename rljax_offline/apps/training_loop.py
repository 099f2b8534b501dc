"""The training loop behind `rljax-offline train` and `demo`: iterations with a progress bar,
metrics as JSON lines, early stop on a target return, a checkpoint and a learning-curve PNG.

A run killed at any moment resumes from its last checkpoint: metrics rows written after that
checkpoint (and a torn last line) are dropped first, so no iteration appears twice. A
non-finite learner metric (NaN or inf loss) stops the run with `TrainingDivergedError` naming
the iteration, before that iteration is checkpointed."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Iterator

import jax

from rljax_offline.algorithms.config import AlgorithmConfig
from rljax_offline.apps.plotting import first_module_metrics, main_loss, save_learning_curve
from rljax_offline.apps.reporting import Logger, MultiLogger, default_logger
from rljax_offline.errors import TrainingDivergedError
from rljax_offline.runtime.distributed import is_writer


def _short(result: dict) -> dict:
    row = {"iteration": result["training_iteration"]}
    named = main_loss(first_module_metrics(result))
    if named is not None:  # None: an iteration that made no update yet
        row[named[0]] = round(named[1], 5)
    row["time_this_iter_s"] = round(result["time_this_iter_s"], 3)
    if "evaluation" in result:
        ev = result["evaluation"]["env_runners"]
        row["episode_return_mean"] = round(ev["episode_return_mean"], 2)
    return row


def checkpointed_steps(algo, path: str, env_steps: int, num_checkpoints: int,
                       dense_first: int = 1) -> Iterator[tuple[int, str]]:
    """Trains the online `algo` for `env_steps` env steps and saves a checkpoint under
    `path/<env steps>` about every `env_steps / num_checkpoints` of them (and at the end),
    yielding `(env steps, checkpoint)` after each: what the data-set recipes' behaviour runs
    (SAC's, IPPO's) evaluate. `save()` finishes an `offline_data(output=...)` recording's
    open file, so the recording holds every episode sampled before the checkpoint.

    Args:
      algo: a built online algorithm (its `train()` reports
        `num_env_steps_sampled_lifetime`).
      path: the checkpoints' folder.
      env_steps: the budget.
      num_checkpoints: about how many checkpoints.
      dense_first: the first `env_steps / num_checkpoints` env steps get this many
        checkpoints instead of one (a policy that learns fast early: the IPPO recipes'
        medium checkpoint is found among them).
    """
    every = max(1, env_steps // num_checkpoints)
    early = max(1, every // max(1, dense_first))
    steps, next_at = 0, early
    while steps < env_steps:
        steps = int(algo.train()["num_env_steps_sampled_lifetime"])
        if steps >= next_at or steps >= env_steps:
            next_at = (min(every, (steps // early + 1) * early) if steps < every
                       else (steps // every + 1) * every)
            yield steps, algo.save(os.path.join(path, f"{steps:09d}"))


def result_value(result: dict, metric: str):
    """The value of a result at RLlib's slash-separated metric path (Tune's stop keys, e.g.
    `"evaluation/env_runners/episode_return_mean"`); None where the result has none (an
    iteration without an evaluation)."""
    value = result
    for key in metric.split("/"):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def check_finite(result: dict) -> None:
    """Raises `TrainingDivergedError` when any learner metric of `result` is NaN or inf
    (losses are named first: they say more than a gradient norm)."""
    for module, metrics in result.get("learners", {}).items():
        for name, value in sorted(metrics.items(), key=lambda kv: "loss" not in kv[0]):
            if isinstance(value, (int, float)) and not math.isfinite(value):
                where = name if module == "default_policy" else f"{module}/{name}"
                raise TrainingDivergedError(result.get("training_iteration"), where, value)


def trim_metrics(path: str, last_iteration: int) -> None:
    """Keeps the rows of `path` up to `last_iteration` (the checkpoint's), dropping rows of
    iterations that were logged but never checkpointed and a line cut by a crash."""
    if not os.path.exists(path):
        return
    kept = []
    with open(path, "rb") as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue  # torn by a crash mid-write
            if isinstance(row, dict) and row.get("training_iteration", 0) <= last_iteration:
                kept.append(line if line.endswith(b"\n") else line + b"\n")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.writelines(kept)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def run_training(config: AlgorithmConfig, *, iterations: int = 50,
                 stop_return: float | None = None, out_dir: str = "rljax_runs/run",
                 progress: bool = True, emit: Callable[[dict], None] | None = None,
                 resume: bool = True, logger: Logger | Callable[[], Logger] | None = None,
                 plot_x_axis: str = "iteration") -> dict:
    """Trains the config's algorithm for up to `iterations` (stopping once the evaluation
    return mean reaches `stop_return`), checkpointing to `out_dir/checkpoint` after every
    iteration, so an interrupted run resumes from its last checkpoint when started again
    with `resume=True`.

    Logs every result to `logger` (or the logger a callable `logger` makes, on the writing
    process only; default: `out_dir/metrics.jsonl` and TensorBoard events in
    `out_dir`, see `rljax_offline.apps.reporting`; closed at the end) and writes
    `out_dir/learning_curve.png` (x-axis `plot_x_axis`); returns a summary (with
    `resumed_from_iteration`, the checkpoint's iteration or 0, and `iterations_trained`, the
    iterations this call ran). In a
    multi-process run every process trains and process 0 alone writes.

    Args:
      config: the algorithm's config.
      iterations: the most `train()` calls.
      stop_return: stop once the evaluation's `episode_return_mean` reaches it (None: never).
      out_dir: the run's folder (checkpoint, metrics, plot).
      progress: show a progress bar on stderr.
      emit: called with each iteration's summary (the CLI prints it as a JSON line).
      resume: continue from `out_dir/checkpoint` when there is one.
      logger: a logger, or a callable that makes one on the writing process (None: the
        default loggers).
      plot_x_axis: the learning curve's x-axis: "iteration", "samples" or "updates".
    """
    from tqdm import tqdm

    os.makedirs(out_dir, exist_ok=True)
    ckpt = os.path.join(out_dir, "checkpoint")
    t0 = time.perf_counter()
    algo = config.build()
    if resume and os.path.isdir(ckpt):
        algo.restore(ckpt)
    resumed_from = algo.iteration  # 0 for a fresh run
    best = None
    reached = False
    metrics_path = os.path.join(out_dir, "metrics.jsonl")
    writer = is_writer()
    if writer:
        trim_metrics(metrics_path, algo.iteration)
        logger = default_logger(out_dir) if logger is None else (
            logger() if callable(logger) and not hasattr(logger, "log") else logger)
    else:
        logger = MultiLogger()  # only process 0 writes
    with MultiLogger(logger) as log, tqdm(total=iterations, initial=algo.iteration,
                                          desc=f"{config.algo_name.upper()} training",
                                          disable=not (progress and writer), unit="it") as bar:
        while algo.iteration < iterations:
            result = algo.train()
            check_finite(result)
            row = _short(result)
            log.log(result, step=algo.iteration)
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
                                target_return=stop_return, x_axis=plot_x_axis,
                                updates_per_iteration=config.updates_per_iteration)
            if writer else None)
    algo.stop()
    return {"iterations": algo.iteration, "resumed_from_iteration": resumed_from,
            "iterations_trained": algo.iteration - resumed_from,
            "best_return": best, "reached_target": reached,
            "seconds": round(time.perf_counter() - t0, 2), "data_load_s":
            round(algo.timers.get("data_load_s", 0.0), 2), "checkpoint": ckpt,
            "metrics": metrics_path, "plot": plot, "num_devices": len(algo.devices),
            "process_index": jax.process_index(), "process_count": jax.process_count()}
