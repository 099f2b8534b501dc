"""CLI faults: bad arguments are one line `error: ...` with exit 2, bad data and damaged
checkpoints one line with exit 1, never a traceback; a run whose loss turns NaN stops with an
error naming the iteration."""

import json
import os
import subprocess

import numpy as np
import pyarrow.parquet as pq
import pytest
from fault_testlib import PYTHON, cartpole_episodes, subprocess_env

from rljax_offline import Episode
from rljax_offline.apps.training_loop import check_finite, trim_metrics
from rljax_offline.cli import main
from rljax_offline.data import write_episodes
from rljax_offline.errors import TrainingDivergedError

BAD_ARGS = [
    [],
    ["bogus"],
    ["train"],
    ["train", "--algo", "cql"],
    ["train", "--algo", "ppo", "--input", "x"],
    ["train", "--input", "x", "--lr", "0"],
    ["train", "--input", "x", "--lr", "-1e-3"],
    ["train", "--input", "x", "--lr", "nan"],
    ["train", "--input", "x", "--lr", "inf"],
    ["train", "--input", "x", "--lr", "fast"],
    ["train", "--input", "x", "--batch-size", "0"],
    ["train", "--input", "x", "--batch-size", str(1 << 40)],
    ["train", "--input", "x", "--iterations", "-3"],
    ["train", "--input", "x", "--hiddens", "64", "0"],
    ["train", "--input", "x", "--num-devices", "0"],
    ["train", "--input", "x", "--env", "NoSuchEnv-v0"],
    ["train", "--input", "x", "--stop-return", "nan"],
    ["train", "--input", "x", "--eval-interval", "-1"],
    ["train", "--input", "x", "--schema", "[1, 2]"],
    ["train", "--input", "x", "--schema", "{not json"],
    ["train", "--input", "x", "--schema", '{"obs": 3}'],
    ["record", "--output", "x", "--episodes", "0"],
    ["record", "--output", "x", "--num-envs", "1.5"],
    ["record", "--output", "x", "--max-rows-per-file", "0"],
    ["convert", "--input", "x", "--output", "y", "--to", "json"],
    ["evaluate", "--checkpoint", "c", "--episodes", "0"],
    ["inspect", "--input", "x", "--on-bad-file", "ignore"],
]


@pytest.mark.parametrize("argv", BAD_ARGS, ids=lambda a: " ".join(a) or "<none>")
def test_bad_arguments_are_one_line_usage_errors(argv, capsys):
    try:  # refused by the parser (SystemExit) or when the flags are put together (returned)
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err


def cli(*args, timeout=120):
    return subprocess.run([PYTHON, "-m", "rljax_offline.cli", *map(str, args)],
                          env=subprocess_env(), capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(out, code):
    assert out.returncode == code, (out.returncode, out.stderr[-2000:])
    lines = out.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and "Traceback" not in out.stderr, out.stderr
    return lines[-1]


def test_bad_data_fifo_and_existing_outputs_exit_1_in_one_line(tmp_path):
    (f,) = write_episodes(cartpole_episodes(2), tmp_path / "d")
    col = pq.read_metadata(f).row_group(0).column(0)
    first_page = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
    data = bytearray(open(f, "rb").read())
    data[first_page + 60] ^= 0xFF  # inside the first page's compressed values
    open(f, "wb").write(bytes(data))
    assert "d/" in assert_one_line_error(cli("inspect", "--input", tmp_path / "d"), 1)
    os.mkfifo(tmp_path / "fifo.parquet")
    line = assert_one_line_error(cli("inspect", "--input", tmp_path / "fifo.parquet"), 1)
    assert "not a regular file" in line
    (tmp_path / "taken").write_text("mine")
    line = assert_one_line_error(cli("record", "--output", tmp_path / "taken", "--episodes", 1),
                                 1)
    assert "existing file" in line and (tmp_path / "taken").read_text() == "mine"
    line = assert_one_line_error(cli("convert", "--input", tmp_path / "d", "--output",
                                     tmp_path / "d" / "sub", "--to", "tabular"), 1)
    assert "inside" in line
    line = assert_one_line_error(cli("evaluate", "--checkpoint", tmp_path / "nope"), 1)
    assert "not a checkpoint" in line


@pytest.mark.slow
def test_non_finite_training_stops_naming_the_iteration(tmp_path):
    # Velocities of 1e38 are inside CartPole's (unbounded) velocity bounds, so the data is
    # valid, but the first layer overflows: the gradients (or the loss) stop being finite.
    rng = np.random.default_rng(0)
    eps = []
    for i in range(4):
        obs = rng.normal(size=(21, 4)).astype(np.float32)
        obs[:, 1] = 3e38
        eps.append(Episode(observations=obs, actions=rng.integers(0, 2, 20),
                           rewards=np.ones(20), terminated=True, id_=f"e{i}"))
    write_episodes(eps, tmp_path / "d")
    out = cli("train", "--input", tmp_path / "d", "--out", tmp_path / "run", "--iterations", 3,
              "--updates-per-iteration", 2, "--batch-size", 16, "--hiddens", 8,
              "--eval-interval", 0, "--num-devices", 1, "--quiet", timeout=300)
    line = assert_one_line_error(out, 1)
    assert "diverged at iteration 1: metric '" in line, line
    assert not (tmp_path / "run" / "checkpoint").exists()  # the NaN state is never saved


def test_check_finite_names_iteration_and_metric():
    ok = {"training_iteration": 4, "learners": {"default_policy": {"policy_loss": 0.3}}}
    check_finite(ok)
    bad = {"training_iteration": 5, "learners": {"default_policy": {"policy_loss": 0.3,
                                                                    "grad_norm": float("inf")}}}
    with pytest.raises(TrainingDivergedError, match="iteration 5.*'grad_norm' is inf") as e:
        check_finite(bad)
    assert (e.value.iteration, e.value.metric) == (5, "grad_norm")


def test_resume_trims_metrics_logged_after_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [json.dumps({"training_iteration": i}) for i in (1, 2, 3)]
    path.write_text("\n".join(rows) + '\n{"training_iter')  # 3 logged, crash mid-row 4
    trim_metrics(str(path), 2)  # the checkpoint holds iteration 2
    assert [json.loads(x)["training_iteration"] for x in path.read_text().splitlines()] == [1, 2]


def test_train_flags_left_out_keep_each_algorithms_defaults():
    """`train` passes only the flags given: CQL keeps its batch of 256 and PPO trains online
    in --env with its own rollout size, no --input."""
    from rljax_offline.cli import build_parser
    from rljax_offline.cli.train import algo_of, config_from_args

    def config(*argv):
        argv = ["train", *argv]
        return config_from_args(build_parser(algo_of(argv)).parse_args(argv))

    cql = config("--algo", "cql", "--input", "x")
    assert cql.train_batch_size_per_learner == 256 and cql.input_ == "x"
    assert config("--input", "x", "--batch-size", "64").train_batch_size_per_learner == 64
    ppo = config("--algo", "ppo", "--env", "CartPole-v1")
    assert ppo.input_ is None and ppo.trains_online
    assert ppo.train_batch_size_per_learner == type(ppo)().train_batch_size_per_learner


def test_train_stream_flags_set_rllibs_materialize_options():
    from rljax_offline.cli import build_parser
    from rljax_offline.cli.train import algo_of, config_from_args

    argv = ["train", "--input", "x", "--stream", "--shuffle-buffer-size", "32"]
    config = config_from_args(build_parser(algo_of(argv)).parse_args(argv))
    assert not config.materialize_data and not config.materialize_mapped_data
    assert config.streams_data and config.shuffle_buffer_size == 32
    for argv in (["train", "--input", "x", "--shuffle-buffer-size", "8"],
                 ["train", "--algo", "ppo", "--stream"]):
        assert main(argv) == 2
