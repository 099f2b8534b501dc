"""Training killed with SIGKILL at a random iteration and started again resumes exactly: the
final parameters are bit-identical to an uninterrupted run's, and no metrics row repeats; with
materialized data (CLI, and a mean-std filter) and with streamed data (shuffle buffer, a
mean-std filter that keeps fitting as the data streams, batches cut across episodes and epoch
ends, prefetch running ahead of the updates)."""

import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest
from fault_testlib import PYTHON, cartpole_episodes, subprocess_env

from rljax_offline.data import write_episodes
from rljax_offline.learning import checkpoint as ckpt

ITERATIONS = 5

# run_training with a mean-std filter in the learner pipeline (not expressible as CLI flags).
_FILTERED = """
import sys
from rljax_offline.algorithms.bc import BCConfig
from rljax_offline.connectors import mean_std_filter
from rljax_offline.apps.training_loop import run_training
data, out, iterations, stream = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
config = (BCConfig().environment("CartPole-v1").offline_data(input_=data)
          .training(lr=1e-3, train_batch_size_per_learner=64, num_updates_per_iteration=5,
                    learner_connector=lambda spaces: [mean_std_filter(as_learner_connector=True)])
          .evaluation(evaluation_interval=0).rl_module(model_config={"fcnet_hiddens": [16]})
          .learners(num_devices=1).debugging(seed=3))
if stream:  # 12 episodes of 15..30 steps: an epoch every ~1.5 iterations, rows left over
    config = config.offline_data(materialize_data=False, materialize_mapped_data=False,
                                 shuffle_buffer_size=5, input_read_batch_size=3,
                                 prefetch_batches=3)
run_training(config, iterations=iterations, out_dir=out, progress=False)
"""


def _command(kind, data, out):
    if kind == "cli":
        return [PYTHON, "-m", "rljax_offline.cli", "train", "--input", data, "--out", out,
                "--iterations", str(ITERATIONS), "--updates-per-iteration", "5",
                "--batch-size", "64", "--hiddens", "16", "--eval-interval", "0",
                "--num-devices", "1", "--seed", "3", "--quiet"]
    return [PYTHON, "-c", _FILTERED, data, out, str(ITERATIONS), str(int(kind == "streaming"))]


def _rows(out):
    path = os.path.join(out, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path) if line.strip()]


def _state_bytes(out):
    folder = os.path.join(out, "checkpoint")
    gen = sorted(n for n in os.listdir(folder) if n.startswith("gen-"))[-1]
    return open(os.path.join(folder, gen, ckpt.STATE_FILE), "rb").read()


def _run_killed(cmd, out, kill_after_rows):
    proc = subprocess.Popen(cmd, env=subprocess_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        if len(_rows(out)) >= kill_after_rows:
            os.kill(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.wait(timeout=60)
    return proc.returncode


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["cli", "mean_std_filter", "streaming"])
def test_sigkill_then_resume_is_bit_identical(tmp_path, kind):
    data = str(tmp_path / "data")
    write_episodes(cartpole_episodes(12, seed=1), data, output_max_rows_per_file=4)
    straight, killed = str(tmp_path / "straight"), str(tmp_path / "killed")
    out = subprocess.run(_command(kind, data, straight), env=subprocess_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    kill_after = int(np.random.default_rng(len(kind)).integers(1, ITERATIONS - 1))
    assert _run_killed(_command(kind, data, killed), killed, kill_after) == -signal.SIGKILL
    out = subprocess.run(_command(kind, data, killed), env=subprocess_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert [r["training_iteration"] for r in _rows(killed)] == list(range(1, ITERATIONS + 1))
    assert _state_bytes(killed) == _state_bytes(straight)
    if kind == "streaming":  # the run crossed epochs and was resumed from a stream cursor
        (cursor,) = ckpt.load_meta(os.path.join(killed, "checkpoint"))["stream"]["processes"]
        assert cursor["epoch"] >= 2 and cursor["batches"] == ITERATIONS * 5
