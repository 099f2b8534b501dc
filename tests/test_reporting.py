"""Loggers: JSON lines keep whole results; TensorBoard events hold every scalar as a tag."""

import json

import numpy as np
import pytest
from tensorboard_testlib import read_tensorboard_scalars

from rljax_offline.apps.reporting import (
    JsonLinesLogger,
    MultiLogger,
    default_logger,
    flatten_scalars,
    flatten_series,
)

RESULT = {
    "training_iteration": 3,
    "learners": {"default_policy": {"policy_loss": np.float32(0.25), "num_steps": 1024}},
    "evaluation": {"env_runners": {"episode_return_mean": 480.5, "episode_returns": [470, 491],
                                   "env": "CartPole-v1"}},
    "done": False,
}


def test_flatten_keeps_numbers_and_series_drops_strings():
    scalars = dict(flatten_scalars(RESULT))
    assert scalars == {"training_iteration": 3.0, "learners/default_policy/policy_loss": 0.25,
                       "learners/default_policy/num_steps": 1024.0,
                       "evaluation/env_runners/episode_return_mean": 480.5, "done": 0.0}
    series = dict(flatten_series(RESULT))
    assert list(series) == ["evaluation/env_runners/episode_returns"]
    np.testing.assert_array_equal(series["evaluation/env_runners/episode_returns"], [470, 491])


def test_default_logger_writes_json_lines_and_tensorboard_events(tmp_path):
    with default_logger(str(tmp_path)) as log:
        for step in (1, 2):
            log.log({**RESULT, "training_iteration": step}, step=step)
    lines = [json.loads(x) for x in open(tmp_path / "metrics.jsonl")]
    assert [r["training_iteration"] for r in lines] == [1, 2]
    assert lines[0]["evaluation"]["env_runners"]["episode_returns"] == [470, 491]
    tags = read_tensorboard_scalars(str(tmp_path))
    assert tags["evaluation/env_runners/episode_return_mean"] == [(1, 480.5), (2, 480.5)]
    assert [s for s, _ in tags["training_iteration"]] == [1, 2]


def test_json_lines_logger_appends_on_resume(tmp_path):
    path = str(tmp_path / "m.jsonl")
    for step in (1, 2):
        with MultiLogger(JsonLinesLogger(path)) as log:
            log.log({"training_iteration": step}, step=step)
    assert [json.loads(x)["training_iteration"] for x in open(path)] == [1, 2]


def test_wandb_project_without_wandb_is_a_clear_error(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *a, **k):
        if name == "wandb":
            raise ImportError("no wandb")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    with pytest.raises(ImportError, match="pip install wandb"):
        default_logger(str(tmp_path), tensorboard=False, wandb_project="p")


def test_wandb_logger_sends_flattened_scalars(tmp_path, monkeypatch):
    """W&B through a stand-in module (the real one needs an account): what it is sent."""
    import sys
    import types

    calls = {}

    class Run:
        def log(self, data, step):
            calls.setdefault("log", []).append((step, data))

        def finish(self):
            calls["finished"] = True

    def init(**kwargs):
        calls["init"] = kwargs
        return Run()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    with default_logger(str(tmp_path), tensorboard=False, wandb_project="proj",
                        config={"lr": 0.1}) as log:
        log.log(RESULT, step=3)
    assert calls["init"]["project"] == "proj" and calls["init"]["config"] == {"lr": 0.1}
    step, data = calls["log"][0]
    assert step == 3 and data["evaluation/env_runners/episode_return_mean"] == 480.5
    assert calls["finished"]
