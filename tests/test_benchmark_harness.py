"""The parity harness's shared parts (benchmarks/_offline_runs.py, _paired_eval.py,
edac_vs_ensembles.py, sac_finetune.py): the rows both reference libraries train on, the
options and progress lines every side shares, and the command line refusing what it cannot
run. Their runs take minutes to hours and need other interpreters; these checks take seconds."""

import dataclasses
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from rljax_offline import Episode
from rljax_offline.data import write_episodes

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import _offline_runs  # noqa: E402
import _paired_eval  # noqa: E402
import d3rlpy_compare  # noqa: E402
import sac_finetune  # noqa: E402


def box_episodes(lengths=(5, 3, 7), seed=0):
    rng = np.random.default_rng(seed)
    return [Episode(observations=rng.normal(size=(T + 1, 3)).astype(np.float32),
                    actions=rng.uniform(-2, 2, size=(T, 1)).astype(np.float32),
                    rewards=rng.normal(size=T), terminated=i % 2 == 0,
                    truncated=i % 2 == 1)
            for i, T in enumerate(lengths)]


def test_transitions_hold_each_rows_true_next_observation(tmp_path, monkeypatch):
    """d3rlpy's arrays and CORL's `next_observations` come from the same rows: row t of an
    episode has its observation t, action t and observation t + 1 (the last one included,
    though d3rlpy's `MDPDataset` has no place for it), and its end is a terminal or a
    timeout as the episode says."""
    monkeypatch.setattr(_offline_runs, "CACHE", str(tmp_path / "cache"))
    episodes = box_episodes()
    write_episodes(episodes, str(tmp_path / "data"))
    arrays = np.load(_offline_runs.transitions_npz(str(tmp_path / "data")))
    starts = np.cumsum([0, *map(len, episodes)])
    assert len(arrays["observations"]) == starts[-1]
    # rows come in the order the reader returns the episodes: match each by its first row
    for ep in episodes:
        (at,) = [s for s in starts[:-1]
                 if np.array_equal(arrays["observations"][s], ep.observations[0])]
        rows = slice(at, at + len(ep))
        np.testing.assert_array_equal(arrays["observations"][rows], ep.observations[:-1])
        np.testing.assert_array_equal(arrays["next_observations"][rows], ep.observations[1:])
        np.testing.assert_array_equal(arrays["actions"][rows], ep.actions)
        np.testing.assert_allclose(arrays["rewards"][rows], ep.rewards, rtol=1e-6)
        ends = np.zeros(len(ep))
        ends[-1] = 1.0
        np.testing.assert_array_equal(arrays["terminals"][rows], ends * ep.is_terminated)
        np.testing.assert_array_equal(arrays["timeouts"][rows], ends * ep.is_truncated)


def test_set_options_parse_as_json_and_refuse_a_missing_equals_sign():
    """`--set` values are JSON (numbers, booleans, lists stay typed), split at the first `=`
    only, and read back what `settings_args` writes; an item without one is refused by name
    rather than read as an empty setting."""
    assert _paired_eval.parse_settings(
        ["num_critics=50", "aligned_windows=true", "hidden=[256, 256]", "name=\"a=b\""]
    ) == {"num_critics": 50, "aligned_windows": True, "hidden": [256, 256], "name": "a=b"}
    settings = {"num_critics": 50, "hidden": [256, 256], "name": "a=b"}
    assert _paired_eval.parse_settings(_paired_eval.settings_args(settings)[1::2]) == settings
    assert _paired_eval.settings_args(None) == []
    with pytest.raises(SystemExit, match="'num_critics': expected NAME=JSON"):
        _paired_eval.parse_settings(["num_critics"])


def test_progress_line_starts_with_the_tag_the_driver_streams(capsys):
    """The driver shows a worker's stderr lines that start with its tag; the line says how
    far the run is, its last return and its time so far."""
    _paired_eval.print_progress("[corl]", "EDAC", 1, 2000, 20000, 213.456, 61.7)
    assert capsys.readouterr().err == "[corl] EDAC seed 1: 2000/20000 updates, return 213.5, 62 s\n"


@pytest.mark.parametrize("argv, message", [
    (["--only", "edac,sac-9"], "unknown ['sac-9']"),
    (["--only", "corl-edac"], "corl-edac needs --corl-file"),
    (["--data", "somewhere"], "--data needs --env"),
])
def test_edac_benchmark_refuses_what_it_cannot_run(argv, message):
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent)}  # as the README runs it
    done = subprocess.run([sys.executable, str(BENCH / "edac_vs_ensembles.py"), *argv],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_parity_benchmark_names_an_unknown_case():
    """A mistyped `--only` case is refused before any run, with the cases there are."""
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent)}
    done = subprocess.run([sys.executable, str(BENCH / "d3rlpy_compare.py"), "--only",
                           "awac-pendulum,awac-hoper-medium", "--sides", "ours"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 1, done.stderr
    assert "unknown case(s) ['awac-hoper-medium']" in done.stderr
    assert "awac-hopper-medium," in done.stderr


def test_a_swap_of_ours_alone_reuses_its_base_cases_d3rlpy_runs():
    """d3rlpy's saved runs are named after the first case with the same d3rlpy side, so a
    case that changes only ours reads its base case's d3rlpy runs (no d3rlpy run again, no
    links by hand), while a case that changes d3rlpy's side too keeps its own."""
    dc = d3rlpy_compare
    assert dc.d3rlpy_run_name("awac-d3rlpy-target-hopper-medium") == "awac-hopper-medium"
    assert (dc.d3rlpy_run_name("calql-d3rlpy-backup-hopper-medium-replay")
            == "calql-hopper-medium-replay")
    assert dc.d3rlpy_run_name("awac-pendulum-squashed") == "awac-pendulum"
    assert dc.d3rlpy_run_name("bear-pendulum-mmd-off") == "bear-pendulum"
    assert dc.d3rlpy_run_name("bear-mmd-off-hopper-medium") == "bear-hopper-medium"
    assert dc.d3rlpy_run_name("rebrac-actor-beta-0.01-hopper-medium") == "rebrac-hopper-medium"
    for own in ("crr-pendulum-greedy", "td3bc-pendulum-flax-init", "dt-pendulum-small",
                "awac-hopper-medium", "awac-hopper-medium-replay", "plas-pendulum",
                "rebrac-both-actor-beta-0.01-hopper-medium"):
        assert dc.d3rlpy_run_name(own) == own
    for name, case in dc.CASES.items():
        base = dc.d3rlpy_run_name(name)
        assert dc.d3rlpy_run_name(base) == base
        assert dc.d3rlpy_side(dc.CASES[base]) == dc.d3rlpy_side(case)


def test_a_longer_run_plots_beside_the_cases_own_figure():
    assert d3rlpy_compare.figure_name("discrete-bcq-cartpole", 20000) == "discrete-bcq-cartpole.png"
    assert (d3rlpy_compare.figure_name("discrete-bcq-cartpole", 100000)
            == "discrete-bcq-cartpole-u100000.png")


def test_every_decision_transformer_case_scales_returns_alike_on_both_sides():
    """A scaled Decision Transformer case is a fair comparison only when d3rlpy's reward
    scaler multiplies the returns-to-go by ours' `return_scale` (both unscaled otherwise),
    and a Hopper case acts towards its set's expert return (`for_data`), not Pendulum's."""
    dts = {name: case for name, case in d3rlpy_compare.CASES.items()
           if hasattr(case.ours, "return_scale")}
    assert "dt-small-scaled-hopper-medium" in dts and "dt-pendulum-small-scaled" in dts
    for name, case in dts.items():
        d3rlpy_scale = (case.d3rlpy_overrides or {}).get("reward_scale", 1.0)
        assert case.ours.return_scale == d3rlpy_scale, name
        if "hopper" in name:
            assert case.ours.target_return is None, name


@pytest.mark.parametrize("data", ["pendulum-mixed", "hopper-medium-replay"])
def test_fine_tuning_benchmark_trains_cql_and_calql_alike_but_for_the_bound(data):
    """The offline-to-online benchmark gives CQL and Cal-QL every shared option alike, so the
    calibrated bound is the one difference: CQL's settings on Pendulum (where they reach
    -300), Cal-QL's (d3rlpy's, at its level on the Hopper sets) on a MuJoCo set."""
    pendulum = data == sac_finetune.PENDULUM
    cql, calql = (sac_finetune.offline_config(c, "DATA", "Env-v0", pendulum)
                  for c in (sac_finetune.CQLConfig, sac_finetune.CalQLConfig))
    for field in dataclasses.fields(cql):
        assert getattr(cql, field.name) == getattr(calql, field.name), field.name
    ours = sac_finetune.CQLConfig() if pendulum else sac_finetune.CalQLConfig()
    assert (calql.min_q_weight, calql.lagrangian) == (ours.min_q_weight, ours.lagrangian)
    assert cql.lagrangian is not pendulum  # Cal-QL's (d3rlpy's) Lagrangian weight on Hopper


def test_fine_tuning_ratios_count_a_missed_target_as_the_budget():
    """Steps to the target, per seed, as ratios between starts; a run that never reached it
    counts as the whole budget (a lower bound), and a seed missing a start is left out."""
    runs = [{"seed": 0, "from": "scratch", "steps_to_target": None},
            {"seed": 0, "from": "cql", "steps_to_target": 3000},
            {"seed": 0, "from": "cal_ql", "steps_to_target": 1500},
            {"seed": 1, "from": "scratch", "steps_to_target": 4000},
            {"seed": 1, "from": "cql", "steps_to_target": 2000},
            {"seed": 1, "from": "cal_ql", "steps_to_target": 2000},
            {"seed": 2, "from": "cal_ql", "steps_to_target": 500}]
    assert sac_finetune.median_ratios(runs, budget=15000) == {
        "cql/scratch": round((0.2 + 0.5) / 2, 3), "cal_ql/scratch": round((0.1 + 0.5) / 2, 3),
        "cal_ql/cql": round((0.5 + 1.0) / 2, 3)}


def test_fine_tuning_benchmark_asks_for_a_target_off_pendulum(tmp_path):
    """-250 is Pendulum's target; on another set the command asks for one before it runs."""
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent)}
    done = subprocess.run([sys.executable, str(BENCH / "sac_finetune.py"), "--data",
                           "hopper-medium", "--data-root", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 2 and "--target: give the return to reach" in done.stderr
    assert not any(tmp_path.iterdir())  # nothing made
