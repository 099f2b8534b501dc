"""`debugging(seeds=[...])`: N runs of one offline config in one program (`SeedRuns`). Each seed's
params equal the separate run of the config with that seed (float32: to rounding; float64
exactness is tests/test_seeds.py), metrics come per seed and as mean +- std, each seed evaluates
in the env, one seed's checkpoint loads as any other (the algorithm, its trained policy), and
one checkpoint of every seed resumes them exactly or gives one seed's policy."""

import jax
import numpy as np
import pytest

from rljax_offline import BCConfig, PPOConfig
from rljax_offline.acting.env_runner import record_expert
from rljax_offline.algorithms.algorithm import Algorithm
from rljax_offline.algorithms.seeds import SeedRuns
from rljax_offline.errors import CheckpointError, ConfigError
from rljax_offline.learning.trained_policy import load_policy

SEEDS = [0, 3]


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("seeds") / "data")
    record_expert("CartPole-v1", path, num_episodes=8, mix="expert:0.5,random:0.5", seed=0,
                  progress=False)
    return (BCConfig().environment("CartPole-v1").offline_data(input_=path)
            .training(num_updates_per_iteration=10, train_batch_size_per_learner=64)
            .rl_module(model_config={"fcnet_hiddens": [16]})
            .evaluation(evaluation_interval=0, evaluation_duration=2, evaluation_num_envs=2))


def test_each_seed_is_its_own_run(config, tmp_path):
    runs = config.debugging(seeds=SEEDS).build()
    assert isinstance(runs, SeedRuns)
    for _ in range(2):
        result = runs.train()
    assert len(result["per_seed"]) == 2 and "total_loss" in result["mean"]
    assert result["std"]["total_loss"] >= 0.0
    for i, seed in enumerate(SEEDS):
        alone = config.debugging(seed=seed).build()
        alone.train()
        alone.train()
        want = jax.tree_util.tree_leaves(jax.device_get(alone.state.params))
        got = jax.tree_util.tree_leaves(runs.policy(i).params)
        for a, b in zip(want, got):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
        alone.stop()
    evaluation = runs.evaluate()
    assert len(evaluation["per_seed"]) == 2 and evaluation["episode_return_std"] >= 0.0
    exported = runs.export_policy(str(tmp_path / "seed3.stablehlo"), 1)
    assert exported
    path = runs.save_seed(str(tmp_path / "seed3"), 1)
    policy = load_policy(path)
    assert policy.seed == 3
    for a, b in zip(jax.tree_util.tree_leaves(policy.params),
                    jax.tree_util.tree_leaves(runs.policy(1).params)):
        np.testing.assert_array_equal(a, b)
    back = Algorithm.from_checkpoint(path)
    assert back.iteration == 2 and back.train()["training_iteration"] == 3
    back.stop()
    runs.stop()


def test_streamed_data_and_online_learners_are_named_errors(config):
    with pytest.raises(ConfigError, match="streams"):
        config.offline_data(materialize_data=False,
                            materialize_mapped_data=False).debugging(seeds=SEEDS)
    with pytest.raises(ConfigError, match="online"):
        PPOConfig().debugging(seeds=SEEDS)
    with pytest.raises(ConfigError, match="distinct"):
        config.debugging(seeds=[1, 1])
    with pytest.raises(ConfigError, match="distinct"):
        config.debugging(seeds=[])


def test_one_checkpoint_holds_every_seed_and_resumes_exactly(config, tmp_path):
    runs = config.debugging(seeds=SEEDS).build()
    runs.train()
    path = runs.save(str(tmp_path / "all"))
    runs.train()
    back = Algorithm.from_checkpoint(path)
    assert isinstance(back, SeedRuns) and back.seeds == SEEDS
    assert back.iteration == 1
    # a config without the seeds (what checkpoints saved before `seeds` was an option)
    earlier = Algorithm.from_checkpoint(path, config)
    assert isinstance(earlier, SeedRuns) and earlier.seeds == SEEDS and earlier.iteration == 1
    earlier.stop()
    back.train()
    for i in range(len(SEEDS)):
        for a, b in zip(jax.tree_util.tree_leaves(runs.policy(i).params),
                        jax.tree_util.tree_leaves(back.policy(i).params)):
            np.testing.assert_array_equal(a, b)  # the same program from the same state
    one = load_policy(path, seed=3)
    assert one.seed == 3 and one.params["policy"] is not None
    with pytest.raises(CheckpointError, match=r"seeds \[0, 3\]"):
        load_policy(path)
    alone = config.build()
    with pytest.raises(CheckpointError, match="seeds=") as one_run:
        alone.restore(path)
    alone.stop()
    assert "Algorithm.from_checkpoint" in str(one_run.value)
    other = config.debugging(seeds=[0, 4]).build()
    with pytest.raises(CheckpointError, match="seeds"):
        other.restore(path)
    other.stop()
    runs.stop()
    back.stop()
