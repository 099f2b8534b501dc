"""Where training results go: JSON lines, TensorBoard event files, Weights & Biases.

A logger takes the nested result dicts of `Algorithm.train()` / `evaluate()` and a step. Scalars
are flattened to slash-separated tags (`evaluation/env_runners/episode_return_mean`), lists of
numbers (per-episode returns) become histograms. TensorBoard files are written by tensorboardX
(pure Python and protobuf: no TensorFlow); W&B is used only when asked for and installed.

Example:
    >>> with default_logger("runs/bc", wandb_project=None) as log:
    ...     for _ in range(10):
    ...         result = algo.train()
    ...         log.log(result, step=result["training_iteration"])
"""

from __future__ import annotations

import json
import numbers
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np


class Logger(Protocol):
    """What `run_training` needs: `log(result, step)` and `close()`."""

    def log(self, result: Mapping[str, Any], step: int) -> None: ...

    def close(self) -> None: ...


def flatten_scalars(result: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """`(tag, value)` for every number (bools included) in a nested result dict."""
    for key, value in result.items():
        tag = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from flatten_scalars(value, tag + "/")
        elif isinstance(value, (numbers.Number, np.number, np.bool_)) and not isinstance(
                value, complex):
            yield tag, float(value)
        elif isinstance(value, np.ndarray) and value.ndim == 0:
            yield tag, float(value)


def flatten_series(result: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, np.ndarray]]:
    """`(tag, values)` for every non-empty list or 1-d array of numbers in a result dict."""
    for key, value in result.items():
        tag = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from flatten_series(value, tag + "/")
        elif isinstance(value, (Sequence, np.ndarray)) and not isinstance(value, (str, bytes)):
            arr = np.asarray(value)
            if arr.ndim == 1 and arr.size and arr.dtype.kind in "biuf":
                yield tag, arr.astype(np.float64)


class JsonLinesLogger:
    """Appends every result, whole, as one JSON line (a resumed run continues its file).

    The file is opened at the first `log`, so a resumed run can trim rows logged after its
    checkpoint (`training_loop.trim_metrics`) after the logger was made.

    Args:
      path: the JSON-lines file (`metrics.jsonl`).
    """

    def __init__(self, path: str):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path = path
        self._file = None

    def log(self, result: Mapping[str, Any], step: int) -> None:
        if self._file is None:
            self._file = open(self.path, "a")
        self._file.write(json.dumps(result, default=_json_default) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _json_default(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.tolist()
    return float(x)


class TensorBoardLogger:
    """TensorBoard event files under `logdir` (`tensorboard --logdir <out>` shows them).

    Args:
      logdir: the folder for the event files.
    """

    def __init__(self, logdir: str):
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise ImportError("TensorBoard logging needs tensorboardX: "
                              "pip install tensorboardX") from None
        self.logdir = logdir
        self._writer = SummaryWriter(logdir=logdir)

    def log(self, result: Mapping[str, Any], step: int) -> None:
        for tag, value in flatten_scalars(result):
            self._writer.add_scalar(tag, value, global_step=step)
        for tag, values in flatten_series(result):
            self._writer.add_histogram(tag, values, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbLogger:
    """Scalars to a Weights & Biases run (`wandb` must be installed; it is never required).

    Args:
      project: the W&B project.
      run_dir: where wandb keeps its local files (None: its default).
      config: the run's config, shown by W&B.
      name: the run's name (None: W&B picks one).
    """

    def __init__(self, project: str, *, run_dir: str | None = None,
                 config: Mapping[str, Any] | None = None, name: str | None = None):
        try:
            import wandb
        except ImportError:
            raise ImportError("--wandb-project needs the wandb package: "
                              "pip install wandb") from None
        self._run = wandb.init(project=project, dir=run_dir, config=dict(config or {}),
                               name=name)

    def log(self, result: Mapping[str, Any], step: int) -> None:
        self._run.log(dict(flatten_scalars(result)), step=step)

    def close(self) -> None:
        self._run.finish()


class MultiLogger:
    """Several loggers as one; a context manager that closes them all.

    Args:
      *loggers: objects with `log(result, step)` and `close()`; None entries are dropped.
    """

    def __init__(self, *loggers: Logger):
        self.loggers = [lg for lg in loggers if lg is not None]

    def log(self, result: Mapping[str, Any], step: int) -> None:
        for lg in self.loggers:
            lg.log(result, step)

    def close(self) -> None:
        for lg in self.loggers:
            lg.close()

    def __enter__(self) -> MultiLogger:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def default_logger(out_dir: str, *, tensorboard: bool = True, wandb_project: str | None = None,
                   config: Mapping[str, Any] | None = None) -> MultiLogger:
    """A run's loggers: `out_dir/metrics.jsonl`, TensorBoard events in `out_dir` (unless
    `tensorboard=False`) and, with `wandb_project`, W&B.

    Args:
      out_dir: the run's folder.
      tensorboard: write TensorBoard events too.
      wandb_project: a W&B project to log to as well (None: no W&B).
      config: the run's config, for W&B.
    """
    loggers: list[Logger] = [JsonLinesLogger(os.path.join(out_dir, "metrics.jsonl"))]
    try:
        if tensorboard:
            loggers.append(TensorBoardLogger(out_dir))
        if wandb_project:
            loggers.append(WandbLogger(wandb_project, run_dir=out_dir, config=config))
    except BaseException:
        MultiLogger(*loggers).close()  # no open files left behind by a failed start
        raise
    return MultiLogger(*loggers)
