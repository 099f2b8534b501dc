"""Recording through any algorithm's config, as RLlib does (`offline_data(output=...)`),
`env_runners(batch_mode=..., rollout_fragment_length=...)`, `restore_from_path(path,
component=...)` and RLlib's result-key constants."""

import pathlib
import re

import jax
import numpy as np
import pyarrow.parquet as pq
import pytest

from rljax_offline import BCConfig, ConfigError, PPOConfig, read_episodes, record_expert
from rljax_offline.apps.training_loop import result_value
from rljax_offline.constants import (
    COMPONENT_LEARNER,
    COMPONENT_RL_MODULE,
    ENV_RUNNER_RESULTS,
    EPISODE_RETURN_MEAN,
    EVALUATION_RESULTS,
)

SMALL = {"fcnet_hiddens": [16]}


def _ppo(**env_runners):
    return (PPOConfig().environment("CartPole-v1").env_runners(**env_runners)
            .training(train_batch_size_per_learner=256, minibatch_size=128, num_epochs=1)
            .rl_module(model_config=SMALL))


def _files(root) -> list[pathlib.Path]:
    return sorted(pathlib.Path(root).rglob("*.parquet"))


def test_ppo_records_sampled_and_evaluation_episodes_in_rllibs_layout(tmp_path):
    out = tmp_path / "out"
    algo = _ppo().offline_data(output=str(out), output_max_rows_per_file=3).build()
    sampled = []
    for _ in range(3):
        algo.train()
        sampled.append(algo.env_steps_sampled)
    algo.evaluate(4)
    algo.stop()
    files = _files(out)
    assert {f.relative_to(out).parts[0] for f in files} == {"cartpole-v1"}
    assert all(re.fullmatch(r"run-\d{6}-\d{5}", f.parent.name) for f in files)
    by_group = {g: [f for f in files if f.name.startswith(g)] for g in ("sampled", "evaluation")}
    evaluation = read_episodes([str(f) for f in by_group["evaluation"]])
    assert len(evaluation) == 4
    recorded = read_episodes([str(f) for f in by_group["sampled"]])
    # every sampled episode that finished, whole (chunks joined), each once
    assert recorded and all(ep.is_done and ep.t_started == 0 for ep in recorded)
    assert len({ep.id_ for ep in recorded}) == len(recorded)
    assert sum(len(ep) for ep in recorded) <= sampled[-1]
    assert "action_logp" in recorded[0].extra_model_outputs
    assert all(pq.ParquetFile(f).metadata.num_rows <= 3 for f in files)


def test_stop_writes_the_last_file_unless_told_not_to(tmp_path):
    for remaining, expected in ((True, 5), (False, 4)):
        out = tmp_path / f"out_{remaining}"
        algo = (_ppo().offline_data(output=str(out), output_max_rows_per_file=2,
                                    output_write_remaining_data=remaining).build())
        algo.evaluate(5)  # two full files and one with one episode
        algo.stop()
        assert len(read_episodes(str(out))) == expected


def test_save_finishes_the_open_file(tmp_path):
    out = tmp_path / "out"
    algo = (BCConfig().environment("CartPole-v1").rl_module(model_config=SMALL)
            .offline_data(output=str(out)).build())
    algo.evaluate(3)
    assert _files(out) == []  # one file until save() or stop()
    algo.save(str(tmp_path / "ckpt"))
    assert len(read_episodes(str(out))) == 3
    algo.stop()


def test_complete_episodes_samples_whole_episodes_only():
    algo = _ppo(batch_mode="complete_episodes", num_envs_per_env_runner=2).build()
    chunks, finished = algo.sample_steps(100)
    assert chunks and all(ep.is_done and ep.t_started == 0 for ep in chunks)
    assert sum(len(ep) for ep in chunks) >= 100
    assert [n for _, n in finished] == [len(ep) for ep in chunks]
    algo.stop()


def test_rollout_fragment_length_samples_whole_rounds():
    algo = _ppo(rollout_fragment_length=64, num_envs_per_env_runner=2).build()
    chunks, _ = algo.sample_steps(200)  # rounds of 64 x 2 env steps: 256
    # (an env that resets on a step records none: up to one step more per env)
    assert 256 <= sum(len(ep) for ep in chunks) <= 256 + 2
    algo.stop()


def test_env_runner_options_are_checked():
    with pytest.raises(ConfigError, match="batch_mode must be one of"):
        PPOConfig().env_runners(batch_mode="whole")
    with pytest.raises(ConfigError, match="rollout_fragment_length sets the steps"):
        BCConfig().env_runners(rollout_fragment_length=50)
    BCConfig().env_runners(batch_mode="complete_episodes")  # evaluation runs whole episodes


def test_restore_from_path_loads_one_component(tmp_path):
    """RL module: the weights only (optimizer state, iteration stay); learner: the optimizer
    state too. RLlib's component paths and a path into the checkpoint work; other
    algorithms and unknown components are named errors."""
    data = str(tmp_path / "data")
    record_expert("CartPole-v1", data, num_episodes=5)
    config = (BCConfig().environment("CartPole-v1").offline_data(input_=data)
              .training(num_updates_per_iteration=5).evaluation(evaluation_interval=0)
              .rl_module(model_config=SMALL))
    trained = config.build()
    trained.train()
    trained.save(str(tmp_path / "ckpt"))
    saved = jax.device_get(trained.state)
    trained.stop()

    fresh = config.build()
    before = jax.device_get(fresh.state)
    fresh.restore_from_path(str(tmp_path / "ckpt"), component=COMPONENT_RL_MODULE)
    now = jax.device_get(fresh.state)
    _equal(now.params, saved.params)
    _equal(now.opt_states, before.opt_states)
    assert fresh.iteration == 0

    fresh.restore_from_path(str(tmp_path / "ckpt" / "learner_group" / "learner"),
                            component=f"learner_group/{COMPONENT_LEARNER}")
    _equal(jax.device_get(fresh.state).opt_states, saved.opt_states)
    with pytest.raises(ValueError, match="unknown component 'optimizer'"):
        fresh.restore_from_path(str(tmp_path / "ckpt"), component="optimizer")
    fresh.stop()
    ppo = _ppo().build()
    with pytest.raises(ValueError, match="holds a 'bc' algorithm, not 'ppo'"):
        ppo.restore_from_path(str(tmp_path / "ckpt"), component=COMPONENT_RL_MODULE)
    ppo.stop()


def _equal(a, b):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def test_the_guides_stop_metric_reads_the_result():
    metric = f"{EVALUATION_RESULTS}/{ENV_RUNNER_RESULTS}/{EPISODE_RETURN_MEAN}"
    assert metric == "evaluation/env_runners/episode_return_mean"
    assert result_value({"evaluation": {"env_runners": {"episode_return_mean": 3.0}}},
                        metric) == 3.0
    assert result_value({"training_iteration": 1}, metric) is None
