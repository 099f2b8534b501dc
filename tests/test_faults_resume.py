"""Training killed with SIGKILL at a random iteration and started again resumes exactly: the
final parameters are bit-identical to an uninterrupted run's, no metrics row repeats, and the
second process trains only the iterations after the checkpoint (a run that ignored it would
retrain from iteration 1 to the same bytes); with
materialized data (CLI, and a mean-std filter) and with streamed data (shuffle buffer, a
mean-std filter that keeps fitting as the data streams, batches cut across episodes and epoch
ends, prefetch running ahead of the updates)."""

import json
import os
import signal
import subprocess

import numpy as np
import pytest
from fault_testlib import PYTHON, cartpole_episodes, subprocess_env

from rljax_offline.data import write_episodes
from rljax_offline.learning import checkpoint as ckpt

ITERATIONS = 5

# run_training with a mean-std filter in the learner pipeline (not expressible as CLI flags).
_FILTERED = """
import json
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
print(json.dumps(run_training(config, iterations=iterations, out_dir=out, progress=False)))
"""


# Holds the run after logging iteration RLJAX_TEST_HOLD_AT (before checkpointing it): prints
# HOLD and waits on stdin, so the test's SIGKILL lands mid-run at a known point, however fast
# the iterations go. Wraps run_training for the CLI and the scripts alike.
_HOLD = """
import os, sys
import rljax_offline.apps.training_loop as _tl
_run, _at = _tl.run_training, int(os.environ.get("RLJAX_TEST_HOLD_AT", "0"))
def _held(*args, emit=None, **kwargs):
    def hold(row):
        if emit is not None:
            emit(row)
        if row["iteration"] == _at:
            print("HOLD", flush=True)
            sys.stdin.readline()
    return _run(*args, emit=hold, **kwargs)
_tl.run_training = _held
"""


def _command(kind, data, out):
    if kind == "cli":
        return [PYTHON, "-c", _HOLD + "from rljax_offline.cli import main; sys.exit(main())",
                "train", "--input", data, "--out", out,
                "--iterations", str(ITERATIONS), "--updates-per-iteration", "5",
                "--batch-size", "64", "--hiddens", "16", "--eval-interval", "0",
                "--num-devices", "1", "--seed", "3", "--quiet"]
    return [PYTHON, "-c", _HOLD + _FILTERED, data, out, str(ITERATIONS),
            str(int(kind == "streaming"))]


def _rows(out):
    path = os.path.join(out, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path) if line.strip()]


def _state_bytes(out):
    folder = os.path.join(out, "checkpoint")
    gen = sorted(n for n in os.listdir(folder) if n.startswith("gen-"))[-1]
    return open(os.path.join(folder, gen, ckpt.STATE_FILE), "rb").read()


def _run_killed(cmd, hold_at):
    """Runs `cmd` until it has logged iteration `hold_at` (not yet checkpointed), then kills it."""
    proc = subprocess.Popen(cmd, env={**subprocess_env(), "RLJAX_TEST_HOLD_AT": str(hold_at)},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        held = any(line.strip() == "HOLD" for line in proc.stdout)  # stops reading at HOLD
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return held, proc.returncode


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["cli", "mean_std_filter", "streaming"])
def test_sigkill_then_resume_is_bit_identical(tmp_path, kind):
    data = str(tmp_path / "data")
    write_episodes(cartpole_episodes(12, seed=1), data, output_max_rows_per_file=4)
    straight, killed = str(tmp_path / "straight"), str(tmp_path / "killed")
    out = subprocess.run(_command(kind, data, straight), env=subprocess_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    hold_at = int(np.random.default_rng(len(kind)).integers(2, ITERATIONS))
    assert _run_killed(_command(kind, data, killed), hold_at) == (True, -signal.SIGKILL)
    saved = ckpt.load_meta(os.path.join(killed, "checkpoint"))["iteration"]
    assert saved == hold_at - 1  # killed after logging iteration hold_at, before saving it
    out = subprocess.run(_command(kind, data, killed), env=subprocess_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    # The second process went on from the checkpoint: it trained only the iterations after it
    # (a run that ignored the checkpoint would retrain 1..N to the same bytes).
    summary = json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1])
    assert summary["resumed_from_iteration"] == saved
    assert summary["iterations_trained"] == ITERATIONS - saved
    assert [r["training_iteration"] for r in _rows(killed)] == list(range(1, ITERATIONS + 1))
    assert _state_bytes(killed) == _state_bytes(straight)
    if kind == "streaming":  # the run crossed epochs and was resumed from a stream cursor
        (cursor,) = ckpt.load_meta(os.path.join(killed, "checkpoint"))["stream"]["processes"]
        assert cursor["epoch"] >= 2 and cursor["batches"] == ITERATIONS * 5
