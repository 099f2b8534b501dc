"""The scale benchmark (benchmarks/scale.py), tiny: a 10 MB Atari-shaped data set streamed
through BC with the conv net; every timed iteration trains a full batch, its rates agree with
each other, the loss starts near log(6), and RLlib's figure is only quoted."""

import importlib.util
import json
import math
import pathlib

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "scale.py"


@pytest.mark.slow
def test_scale_benchmark_tiny(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("scale_bench", BENCH)
    scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scale)
    scale.main(["--gb", "0.01", "--iterations", "2", "--batch-size", "32",
                "--data", str(tmp_path / "atari")])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["episodes"] == 5 and out["timesteps"] == 5 * scale.EPISODE_LEN
    assert len(list((tmp_path / "atari").rglob("*.parquet"))) == 1
    # every timed iteration trained a full batch, and the rates are that work over one time
    assert out["samples_trained"] == 2 * 32
    seconds = 2 * 32 / out["samples_per_s"]
    assert out["s_per_1024_sample_iteration"] == pytest.approx(seconds / 2 * 1024 / 32,
                                                               rel=0.01, abs=2e-3)
    assert out["obs_mb_per_s"] == pytest.approx(out["samples_per_s"] * 84 * 84 * 4 / 1e6,
                                                rel=0.02, abs=0.1)
    assert out["peak_rss_mb"] >= out["peak_rss_mb_after_first_iteration"] > 0
    # RLlib's figure is quoted with its source and in no ratio
    assert "speedup_vs_rllib" not in out and "quoted" in out["rllib_quoted"]["source"]
    assert math.isfinite(out["policy_loss"])
    # the loss of 6 random labels starts near log(6)
    assert abs(out["policy_loss"] - math.log(6)) < 0.5
