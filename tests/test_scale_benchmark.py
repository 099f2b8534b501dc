"""The scale benchmark (benchmarks/scale.py), tiny: a 10 MB Atari-shaped data set streamed
through BC with the conv net; it reports its figures and the loss is a real number."""

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
    assert out["samples_per_s"] > 0 and out["obs_mb_per_s"] > 0
    assert math.isfinite(out["policy_loss"])
    # the loss of 6 random labels starts near log(6)
    assert abs(out["policy_loss"] - math.log(6)) < 0.5
