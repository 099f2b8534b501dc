"""Multi-host training on `jax.distributed`: 2 processes on localhost, 2 fake CPU devices each.

* the on-device sampler over a global mesh of 4 devices in 2 processes (blocks of 25 and 36
  rows) gives exactly the one-device result, for BC and MARWIL and both sample units, and
  the parameters are identical on both processes; so do streamed batches whose rows each
  process has on a local device (`multihost_worker.py`);
* `rljax-offline train` with `--coordinator-address --num-processes --process-id`: both
  processes train the same parameters from their share of the files; process 0 alone writes;
* streamed data saved and resumed in a 2-process run: each process's stream cursor (its own
  share of the files) is in process 0's checkpoint, and the resumed run is bit-identical;
* a killed process ends the other with an error within the heartbeat timeout (plus a bounded
  slack), never a hang;
* bad settings (unreachable coordinator, process id out of range, fewer files than
  processes, a malformed address) are one-line named errors.
"""

import json
import os
import pathlib
import socket
import subprocess
import sys
import time

import pytest

from rljax_offline.runtime import distributed

TESTS = pathlib.Path(__file__).resolve().parent
REPO = TESTS.parent


def _env():
    env = dict(os.environ)
    env.update(PYTHONPATH=f"{REPO}{os.pathsep}{TESTS}", JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=2",
               RLJAX_OFFLINE_COMPILATION_CACHE="0")
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _json_lines(text: str) -> list[dict]:
    """Our JSON lines (gloo prints its connection notes to stdout too)."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def _run_both(make_cmd, timeout=240):
    procs = [subprocess.Popen(make_cmd(i), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=_env(), cwd=REPO) for i in (0, 1)]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            outs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return outs


@pytest.mark.slow
def test_two_processes_sample_exactly_what_one_device_does():
    address = f"127.0.0.1:{_free_port()}"
    outs = _run_both(lambda i: [sys.executable, str(TESTS / "multihost_worker.py"), address,
                                "2", str(i)])
    results = []
    for rc, out, err in outs:
        assert rc == 0, err[-2000:]
        results.append(_json_lines(out)[-1])
    assert [r["process"] for r in results] == [0, 1]
    assert list(results[0]["result"]) == ["marwil-discrete"]
    for algo, units in results[0]["result"].items():
        for unit, r in units.items():
            print(f"{algo} {unit}: 2 processes x 2 devices vs one device: "
                  f"{r['diff_vs_one_device']:.3g}")
            assert r["devices"] == 4 and r["step"] == (3 if unit == "streamed" else 4)
            assert r["diff_vs_one_device"] < 1e-9, (algo, unit)
            assert results[1]["result"][algo][unit] == r  # the same params on both


@pytest.fixture(scope="module")
def four_files(tmp_path_factory):
    from rljax_offline.acting.env_runner import record_expert

    path = tmp_path_factory.mktemp("mh") / "data"
    record_expert("CartPole-v1", str(path), num_episodes=8, progress=False,
                  output_max_rows_per_file=2, num_envs=2)
    return path


def _train_cmd(i, address, data, out, *extra):
    return [sys.executable, "-m", "rljax_offline.cli", "train", "--input", str(data),
            "--batch-size", "64", "--updates-per-iteration", "5", "--hiddens", "16",
            "--out", str(out), "--quiet", "--coordinator-address", address,
            "--num-processes", "2", "--process-id", str(i), *extra]


@pytest.mark.slow
def test_two_process_training_from_the_command_line(four_files, tmp_path):
    address = f"127.0.0.1:{_free_port()}"
    out = tmp_path / "run"
    outs = _run_both(lambda i: _train_cmd(i, address, four_files, out, "--iterations", "2",
                                          "--eval-episodes", "1"))
    summaries, rows = [], []
    for rc, text, err in outs:
        assert rc == 0, err[-2000:]
        lines = _json_lines(text)
        summaries.append(lines[-1])
        rows.append(lines[:-1])
    assert [s["process_index"] for s in summaries] == [0, 1]
    assert all(s["process_count"] == 2 and s["num_devices"] == 4 for s in summaries)
    untimed = [[{k: v for k, v in r.items() if k != "time_this_iter_s"} for r in rs]
               for rs in rows]
    assert len(untimed[0]) == 2 and untimed[0] == untimed[1]  # same losses, same returns
    # process 0 alone writes: one metrics line per iteration, its plot, the checkpoint
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2
    assert summaries[0]["plot"] and summaries[1]["plot"] is None
    assert (out / "checkpoint").is_dir()


# Streamed BC with a mean-std filter, 2 processes: 2 iterations straight into OUT/straight; 1
# into OUT/resumed, then (a new Algorithm restored from its checkpoint) on to 2.
_STREAM_RESUME = """
import json
import sys
from rljax_offline.connectors import mean_std_filter
from rljax_offline.algorithms.bc import BCConfig
from rljax_offline.apps.training_loop import run_training
address, pid, data, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
config = (BCConfig().environment("CartPole-v1")
          .offline_data(input_=data, materialize_data=False, materialize_mapped_data=False,
                        shuffle_buffer_size=3, input_read_batch_size=3)
          .training(train_batch_size_per_learner=64, num_updates_per_iteration=3,
                    learner_connector=lambda spaces: [mean_std_filter(as_learner_connector=True)])
          .rl_module(model_config={"fcnet_hiddens": [16]}).evaluation(evaluation_interval=0)
          .learners(coordinator_address=address, num_processes=2, process_id=pid))
run_training(config, iterations=2, out_dir=out + "/straight", progress=False)
run_training(config, iterations=1, out_dir=out + "/resumed", progress=False)
print(json.dumps(run_training(config, iterations=2, out_dir=out + "/resumed",
                              progress=False)))
"""


@pytest.mark.slow
def test_two_process_streaming_resumes_every_process_cursor(tmp_path):
    from fault_testlib import cartpole_episodes

    from rljax_offline.data import write_episodes
    from rljax_offline.learning import checkpoint as ckpt

    data = tmp_path / "data"  # 4 files of 3 short episodes: past an epoch end in 6 batches
    write_episodes(cartpole_episodes(12, seed=1), str(data), output_max_rows_per_file=3)
    address = f"127.0.0.1:{_free_port()}"
    outs = _run_both(lambda i: [sys.executable, "-c", _STREAM_RESUME, address, str(i),
                                str(data), str(tmp_path)])
    for rc, text, err in outs:
        assert rc == 0, err[-2000:]
        # Every process went on from iteration 1's checkpoint: it trained iteration 2 alone.
        summary = _json_lines(text)[-1]
        assert summary["resumed_from_iteration"] == 1 and summary["iterations_trained"] == 1
    meta = ckpt.load_meta(str(tmp_path / "resumed" / "checkpoint"))
    cursors = meta["stream"]["processes"]
    assert len(cursors) == 2 and cursors[0] != cursors[1]  # each its own share of the files

    def state(run):
        folder = tmp_path / run / "checkpoint"
        gen = sorted(p.name for p in folder.iterdir() if p.name.startswith("gen-"))[-1]
        return (folder / gen / ckpt.STATE_FILE).read_bytes()

    assert state("resumed") == state("straight")
    # One process cannot go on with two processes' cursors: each streamed its own files.
    from rljax_offline.algorithms.bc import BCConfig
    from rljax_offline.connectors import mean_std_filter

    alone = (BCConfig().environment("CartPole-v1")
             .offline_data(input_=str(data), materialize_data=False,
                           materialize_mapped_data=False, shuffle_buffer_size=3,
                           input_read_batch_size=3)
             .training(train_batch_size_per_learner=64, num_updates_per_iteration=3,
                       learner_connector=lambda spaces: [
                           mean_std_filter(as_learner_connector=True)])
             .rl_module(model_config={"fcnet_hiddens": [16]})
             .evaluation(evaluation_interval=0).learners(num_devices=1)).build()
    with pytest.raises(ckpt.CheckpointError,
                       match=r"streamed its data on 2 process\(es\); resume it on as many"):
        alone.restore(str(tmp_path / "resumed" / "checkpoint"))


HEARTBEAT_TIMEOUT_S = 5


@pytest.mark.slow
def test_a_dead_peer_ends_the_other_within_the_heartbeat_timeout(four_files, tmp_path):
    address = f"127.0.0.1:{_free_port()}"
    procs = [subprocess.Popen(
        _train_cmd(i, address, four_files, tmp_path / "run", "--iterations", "100000",
                   "--eval-interval", "0", "--heartbeat-timeout",
                   str(HEARTBEAT_TIMEOUT_S)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=REPO)
        for i in (0, 1)]
    try:
        for line in procs[1].stdout:  # both are training once process 1 reports iterations
            if line.startswith('{"iteration": 2'):
                break
        procs[1].kill()
        t0 = time.monotonic()
        rc = procs[0].wait(timeout=90)
        waited = time.monotonic() - t0
        err = procs[0].stderr.read()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    print(f"process 0 ended {waited:.1f} s after process 1 was killed, exit status {rc}")
    assert rc != 0
    assert "unhealthy" in err or "died" in err, err[-2000:]
    # Within the heartbeat timeout (5 s; measured 4.6 s) plus slack: the coordination service
    # sweeps for missed heartbeats on a period of its own and process 0 then aborts (core
    # dump and all) on a loaded 2-core machine. A hang would wait out the 90 s above instead.
    assert waited < HEARTBEAT_TIMEOUT_S + 10.0, waited


def test_bad_settings_are_one_line_named_errors(monkeypatch):
    with pytest.raises(distributed.DistributedError, match="process_id 2 is out of range"):
        distributed.initialize("127.0.0.1:1234", 2, 2)
    with pytest.raises(distributed.DistributedError, match="must be HOST:PORT"):
        distributed.initialize("localhost", 2, 1)
    t0 = time.monotonic()
    with pytest.raises(distributed.DistributedError,
                       match=r"could not reach the coordinator at 127.0.0.1:\d+ within 1 s"):
        distributed.initialize(f"127.0.0.1:{_free_port()}", 2, 1, initialization_timeout_s=1)
    assert time.monotonic() - t0 < 10
    assert not distributed.is_initialized()
    monkeypatch.setattr(distributed.jax, "process_count", lambda: 3)
    with pytest.raises(distributed.DistributedError,
                       match="has 2 input file.s. for 3 processes"):
        distributed.share_of_files(["a", "b"], "input_='x'")
    assert not distributed.requested(None, 1, 0)


@pytest.mark.slow
def test_cli_unreachable_coordinator_is_one_line(four_files):
    cmd = [sys.executable, "-m", "rljax_offline.cli", "train", "--input", str(four_files),
           "--coordinator-address", f"127.0.0.1:{_free_port()}", "--num-processes", "2",
           "--process-id", "1", "--initialization-timeout", "2", "--quiet"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=REPO, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "could not reach the coordinator" in lines[0], p.stderr
