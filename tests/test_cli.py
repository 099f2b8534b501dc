"""The `rljax-offline` command line: record, inspect, convert, train, evaluate, demo."""

import json
import subprocess
import sys

import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tensorboard_testlib import read_tensorboard_scalars

from rljax_offline.export import load_stablehlo


def cli(*args, cwd=None):
    out = subprocess.run([sys.executable, "-m", "rljax_offline.cli", *args], cwd=cwd,
                         capture_output=True, text=True, timeout=600)
    return out


def last_json(out):
    return json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])


@pytest.mark.slow
def test_record_inspect_convert_train_evaluate(tmp_path):
    data, tab, run = tmp_path / "data", tmp_path / "tab", tmp_path / "run"
    out = cli("record", "--output", str(data), "--episodes", "20", "--max-rows-per-file", "10")
    assert out.returncode == 0, out.stderr
    assert last_json(out)["files"] == 2
    out = cli("inspect", "--input", str(data))
    info = last_json(out)
    assert info["episodes"] == 20 and info["timesteps"] == 10_000
    out = cli("convert", "--input", str(data), "--output", str(tab), "--to", "tabular")
    assert out.returncode == 0, out.stderr
    assert last_json(cli("inspect", "--input", str(tab), "--tabular"))["timesteps"] == 10_000
    out = cli("train", "--input", str(data), "--iterations", "2", "--updates-per-iteration",
              "20", "--hiddens", "32", "--out", str(run), "--quiet")
    assert out.returncode == 0, out.stderr
    summary = last_json(out)
    assert summary["iterations"] == 2 and (run / "learning_curve.png").stat().st_size > 1000
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["training_iteration"] for r in rows] == [1, 2]
    # TensorBoard events beside the JSON lines, every scalar of train() and its evaluation.
    tags = read_tensorboard_scalars(str(run))
    assert [s for s, _ in tags["evaluation/env_runners/episode_return_mean"]] == [1, 2]
    assert "learners/default_policy/policy_loss" in tags
    # An interrupted run resumes from its last checkpoint.
    out = cli("train", "--input", str(data), "--iterations", "3", "--updates-per-iteration",
              "20", "--hiddens", "32", "--out", str(run), "--quiet")
    summary = last_json(out)  # it trained iteration 3 alone, not 1..3 again
    assert summary["iterations"] == 3 and summary["resumed_from_iteration"] == 2
    assert summary["iterations_trained"] == 1
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["training_iteration"] for r in rows] == [1, 2, 3]
    out = cli("evaluate", "--checkpoint", str(run / "checkpoint"), "--episodes", "2",
              "--log-dir", str(tmp_path / "eval"))
    assert out.returncode == 0, out.stderr
    assert last_json(out)["num_episodes"] == 2
    tags = read_tensorboard_scalars(str(tmp_path / "eval"))
    assert [s for s, _ in tags["evaluation/env_runners/episode_return_mean"]] == [3]
    out = cli("export", "--checkpoint", str(run / "checkpoint"), "--output",
              str(tmp_path / "policy.stablehlo"))
    assert out.returncode == 0, out.stderr
    actions, _ = load_stablehlo(last_json(out)["output"])(np.zeros((3, 4), np.float32))
    assert actions.shape == (3,)


def test_record_tabular_rows_per_file_count_timesteps_and_compress(tmp_path):
    out = cli("record", "--output", str(tmp_path / "tab"), "--episodes", "4", "--num-envs", "4",
              "--tabular", "--max-rows-per-file", "1000", "--compress-columns", "obs", "new_obs")
    assert out.returncode == 0, out.stderr
    files = sorted((tmp_path / "tab").rglob("*.parquet"))
    rows = [pq.read_metadata(f).num_rows for f in files]
    # The expert balances CartPole for 500 steps: a file ends at the episode reaching 1000 rows.
    assert rows == [1000, 1000]
    schema = pq.read_schema(files[0])
    assert schema.field("obs").type == pa.string() and schema.field("actions").type == pa.int32()


def test_record_rllib_layout_writes_rllibs_numpy_int32_actions(tmp_path):
    out = cli("record", "--output", str(tmp_path / "eps"), "--episodes", "2", "--num-envs", "2",
              "--rllib-layout")
    assert out.returncode == 0, out.stderr
    (f,) = sorted((tmp_path / "eps").rglob("*.parquet"))
    blob = pq.read_table(f).column("item")[0].as_py()
    actions = msgpack.unpackb(blob, strict_map_key=False)["actions"]["data"]
    # As RLlib records them: numpy int32 scalars (msgpack-numpy maps), not plain msgpack ints.
    assert actions[0] == {b"nd": False, b"type": "<i4", b"data": actions[0][b"data"]}


def test_record_flag_combinations_that_make_no_sense_are_refused(tmp_path):
    out = cli("record", "--output", str(tmp_path / "x"), "--rllib-layout", "--tabular")
    assert out.returncode == 2 and "--rllib-layout" in out.stderr
    out = cli("record", "--output", str(tmp_path / "x"), "--compress-columns", "obs")
    assert out.returncode == 2 and "add --tabular" in out.stderr


def test_bad_input_is_a_clear_error(tmp_path):
    out = cli("inspect", "--input", str(tmp_path / "missing"))
    assert out.returncode == 1  # a data error (usage errors exit 2)
    assert "does not exist" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_demo_reaches_450_and_saves_plots(tmp_path):
    out = cli("demo", "--quiet", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    result = last_json(out)
    assert result["reached_target"] and result["final_return_mean"] >= 450
    assert (tmp_path / "demo_output" / "bc_run" / "learning_curve.png").exists()
    assert (tmp_path / "demo_output" / "returns.png").exists()


def test_env_flag_takes_our_own_env_ids_and_names_an_unknown_one():
    import argparse

    from rljax_offline.cli.args import env_id

    assert env_id("StatelessCartPole-v1") == "StatelessCartPole-v1"
    with pytest.raises(argparse.ArgumentTypeError, match="unknown gymnasium env id 'NoSuchEnv-v0'"):
        env_id("NoSuchEnv-v0")


def test_model_config_flag_gives_recurrent_policies_and_names_unknown_keys(capsys):
    from rljax_offline.cli import build_parser
    from rljax_offline.cli.train import config_from_args

    args = build_parser().parse_args(
        ["train", "--algo", "ppo", "--env", "StatelessCartPole-v1", "--hiddens", "16",
         "--model-config", '{"use_lstm": true, "max_seq_len": 8, "lstm_cell_size": 16}'])
    model = config_from_args(args).model_config
    want = {"fcnet_hiddens": [16], "use_lstm": True, "max_seq_len": 8, "lstm_cell_size": 16}
    assert {k: model[k] for k in want} == want
    args = build_parser().parse_args(["train", "--input", "data", "--model-config",
                                      '{"fcnet_hiddens": [32]}'])
    assert config_from_args(args).model_config["fcnet_hiddens"] == [32]  # over --hiddens
    for bad, said in (('{"use_lstn": true}', "unknown model-config keys ['use_lstn']"),
                      ("[1]", "expected a JSON object of model-config keys"),
                      ("{use_lstm", "not valid JSON")):
        with pytest.raises(SystemExit) as e:
            build_parser().parse_args(["train", "--input", "x", "--model-config", bad])
        assert e.value.code == 2 and said in capsys.readouterr().err


@pytest.mark.slow
def test_sac_trains_from_the_cli_with_auto_target_entropy_and_no_update_at_first(tmp_path):
    """`--target-entropy` takes "auto" or a number; an iteration before learning starts has
    no loss, and its progress line, metrics row and learning curve leave it out."""
    run = tmp_path / "sac"
    out = cli("train", "--algo", "sac", "--env", "Pendulum-v1", "--target-entropy", "auto",
              "--num-steps-sampled-before-learning-starts", "150", "--batch-size", "32",
              "--hiddens", "16", "--iterations", "2", "--eval-episodes", "1",
              "--out", str(run), "--quiet")
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trained = [r["learners"]["default_policy"].get("num_module_steps_trained") for r in rows]
    assert trained[0] == 0 and trained[1] > 0  # 100 env steps a iteration: none, then some
    assert (run / "learning_curve.png").stat().st_size > 1000
    out = cli("train", "--algo", "sac", "--env", "Pendulum-v1", "--target-entropy", "-0.5",
              "--iterations", "1", "--out", str(tmp_path / "number"), "--quiet")
    assert out.returncode == 0, out.stderr
