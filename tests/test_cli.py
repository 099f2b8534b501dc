"""The `rljax-offline` command line: record, inspect, convert, train, evaluate, demo."""

import json
import subprocess
import sys

import pytest


def cli(*args, cwd=None):
    out = subprocess.run([sys.executable, "-m", "rljax_offline.cli", *args], cwd=cwd,
                         capture_output=True, text=True, timeout=600)
    return out


def last_json(out):
    return json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])


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
    # An interrupted run resumes from its last checkpoint.
    out = cli("train", "--input", str(data), "--iterations", "3", "--updates-per-iteration",
              "20", "--hiddens", "32", "--out", str(run), "--quiet")
    assert last_json(out)["iterations"] == 3
    out = cli("evaluate", "--checkpoint", str(run / "checkpoint"), "--episodes", "2")
    assert out.returncode == 0, out.stderr
    assert last_json(out)["num_episodes"] == 2


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
