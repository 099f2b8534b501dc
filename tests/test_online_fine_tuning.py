"""Online fine-tuning of an offline algorithm with its own losses (`training(
online_fine_tuning=True)`, Cal-QL's way): the start from the checkpoint's learner, the
minibatches mixing offline and online rows, the updates the sampled steps buy, exact resume,
the named refusals, and 8 devices equal to 1 in float64."""

import gymnasium as gym
import jax
import numpy as np
import pytest
from learner_testlib import max_diff, random_columns, spec_for, to_float64

from rljax_offline import Algorithm, CalQLConfig, CQLConfig
from rljax_offline.algorithms.config import ConfigError
from rljax_offline.algorithms.mixed_replay import mixed_sampler
from rljax_offline.data.replay import make_replay_buffer
from rljax_offline.learning.data_parallel import DataParallel, select_devices
from rljax_offline.learning.init import init_state

SMALL = {"fcnet_hiddens": [16, 16]}
BATCH = 32


def offline(data, config_class=CalQLConfig):
    return (config_class().environment("Pendulum-v1").offline_data(input_=data)
            .rl_module(model_config=SMALL)
            .training(train_batch_size_per_learner=BATCH, num_updates_per_iteration=20)
            .learners(num_devices=1).debugging(seed=7))


def fine_tuning(data, init_from=None, config_class=CalQLConfig, **training):
    return offline(data, config_class).training(**{
        "online_fine_tuning": True, "init_from": init_from,
        "num_steps_sampled_before_learning_starts": 0, **training}).debugging(seed=1)


@pytest.fixture(scope="module")
def checkpoint(pendulum_mixed, tmp_path_factory):
    """A Cal-QL checkpoint after one offline iteration (20 updates)."""
    algo = offline(pendulum_mixed).build()
    algo.train()
    path = algo.save(str(tmp_path_factory.mktemp("cal_ql") / "ckpt"))
    algo.stop()
    return path


def test_goes_on_from_the_checkpoints_learner_with_its_own_losses(pendulum_mixed, checkpoint):
    saved = Algorithm.from_checkpoint(checkpoint)
    algo = fine_tuning(pendulum_mixed, checkpoint).build()
    assert type(algo).__name__ == "OnlineFineTuning" and algo.started_from == checkpoint
    want, got = jax.device_get(saved.state), jax.device_get(algo.state)
    assert max_diff(want.params, got.params) == 0
    assert max_diff(want.opt_states, got.opt_states) == 0
    assert int(got.step) == int(want.step) == 20
    assert max_diff(want.rng, got.rng) > 0  # the run's own seed draws its keys
    result = algo.train()
    # Pendulum's episodes are 200 steps: whole episodes, one update per sampled step.
    assert result["num_env_steps_sampled_lifetime"] == 200
    learner = result["learners"]["default_policy"]
    assert learner["num_module_steps_trained"] == 200 * BATCH
    assert np.isfinite(learner["cql_loss"])  # the conservative term goes on online
    assert max_diff(got.params, jax.device_get(algo.state.params)) > 0
    assert result["replay_buffer"]["offline_rows"] == 10_000
    assert result["replay_buffer"]["offline_rows_per_update"] == BATCH // 2
    saved.stop()
    algo.stop()


def rows_of(columns: dict) -> set:
    return {tuple(np.round(row, 6)) for row in np.asarray(columns["obs"])}


def test_each_minibatch_holds_offline_rows_then_online_ones(pendulum_mixed):
    algo = fine_tuning(pendulum_mixed, offline_fraction=0.25).build()
    algo.train()
    source = algo.source
    offline_obs = rows_of(jax.device_get(source.offline_state.columns))
    online = jax.device_get(source.buffer_state)
    online_obs = rows_of({"obs": online.columns["obs"][:int(online.size)]})
    assert not offline_obs & online_obs
    batch = jax.device_get(source.sample_minibatch(jax.random.PRNGKey(0)))
    k = BATCH // 4
    assert len(batch["obs"]) == BATCH
    assert rows_of({"obs": batch["obs"][:k]}) <= offline_obs
    assert rows_of({"obs": batch["obs"][k:]}) <= online_obs
    assert set(batch) >= {"obs", "actions", "rewards", "new_obs", "returns_to_go"}
    algo.stop()


def test_updates_follow_the_sampled_steps_at_the_training_intensity(pendulum_mixed):
    # Half an update per env step, in scans of 50: a 200-step episode buys 100 updates.
    algo = fine_tuning(pendulum_mixed, training_intensity=BATCH / 2).build()
    trained = [algo.train()["learners"]["default_policy"]["num_module_steps_trained"]
               for _ in range(2)]
    assert trained == [100 * BATCH, 100 * BATCH]
    algo.stop()
    # Learning starts once 300 rows were added: the first episode buys nothing.
    algo = fine_tuning(pendulum_mixed, num_steps_sampled_before_learning_starts=300).build()
    trained = [algo.train()["learners"]["default_policy"]["num_module_steps_trained"]
               for _ in range(2)]
    assert trained == [0, 200 * BATCH]
    algo.stop()


def test_a_restored_run_keeps_its_buffer_and_the_updates_it_is_owed(pendulum_mixed, checkpoint,
                                                                     tmp_path):
    # Scans of 150 updates, one per env step: a 200-step episode leaves 50 owed.
    algo = fine_tuning(pendulum_mixed, checkpoint, store_buffer_in_checkpoints=True).reporting(
        min_sample_timesteps_per_iteration=150).build()
    algo.train()
    assert algo.source.owed == 50
    path = algo.save(str(tmp_path / "ft"))
    restored = Algorithm.from_checkpoint(path)
    assert type(restored).__name__ == "OnlineFineTuning"
    assert restored.source.owed == 50 and restored.source.rows_added == 200
    assert max_diff(jax.device_get(algo.state), jax.device_get(restored.state)) == 0
    assert max_diff(jax.device_get(algo.source.buffer_state.columns),
                    jax.device_get(restored.source.buffer_state.columns)) == 0
    for run in (algo, restored):  # 50 + 200 owed: one scan of 150, 100 left
        assert run.train()["learners"]["default_policy"]["num_module_steps_trained"] == (
            150 * BATCH)
        assert run.source.owed == 100
        # the offline rows read again as the checkpoint's training saw them
        assert run.source.num_offline_rows == 10_000
    algo.stop()
    restored.stop()


@pytest.mark.parametrize("change,message", [
    ({"init_from": "ckpt"}, "init_from starts online fine-tuning"),
    ({"online_fine_tuning": True, "offline_fraction": 1.0}, "offline_fraction=1"),
    ({"online_fine_tuning": True, "offline_fraction": 1.5}, "offline_fraction must be"),
])
def test_what_it_cannot_do_is_a_one_line_config_error(change, message):
    with pytest.raises(ConfigError, match=message) as e:
        CalQLConfig().training(**change)
    assert "\n" not in str(e.value)


def test_offline_rows_need_offline_data_and_one_seed():
    with pytest.raises(ConfigError, match="set offline_data"):
        CQLConfig().environment("Pendulum-v1").training(online_fine_tuning=True)
    CQLConfig().environment("Pendulum-v1").training(online_fine_tuning=True,
                                                    offline_fraction=0.0)
    with pytest.raises(ConfigError, match="seeds"):
        (CQLConfig().offline_data(input_="x").debugging(seeds=[0, 1])
         .training(online_fine_tuning=True))


def test_mixed_minibatches_over_eight_devices_equal_one_in_float64():
    spaces = (gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32))
    spec = spec_for(CalQLConfig().rl_module(model_config=SMALL), spaces)
    offline_rows = random_columns(spec.data.columns, *spaces, 100, seed=2)
    online_rows = random_columns(spec.data.columns, *spaces, 60, seed=3)
    out = {}
    with jax.enable_x64(True):
        for n in (1, 8):
            dp = DataParallel(spec.learning, select_devices(n), BATCH)
            rings = (make_replay_buffer(capacity=100, batch_size=8),
                     make_replay_buffer(capacity=128, batch_size=BATCH - 8))
            states = tuple(dp.put_replicated(ring.add(ring.init(to_float64(rows)),
                                                      to_float64(rows)))
                           for ring, rows in zip(rings, (offline_rows, online_rows)))
            train = dp.put_replicated(to_float64(init_state(spec.learning, 1)))
            train, _ = dp.scan_on_buffer(4, mixed_sampler(*rings))(train, states)
            out[n] = jax.device_get(train)
    diff = max_diff(out[1].params, out[8].params)
    print(f"Cal-QL on mixed minibatches, 8 devices vs 1 after 4 updates: {diff:.3g}")
    assert diff < 1e-9 and int(out[8].step) == 4


def test_discrete_cql_fine_tunes_online_too():
    algo = (CQLConfig().environment("CartPole-v1").rl_module(model_config=SMALL)
            .training(online_fine_tuning=True, offline_fraction=0.0,
                      num_steps_sampled_before_learning_starts=50,
                      train_batch_size_per_learner=BATCH).learners(num_devices=1)).build()
    before = jax.device_get(algo.state.params)
    result = algo.train()  # whole episodes of at least 100 steps: one scan of 100 updates
    assert result["num_env_steps_sampled_lifetime"] >= 100
    assert result["learners"]["default_policy"]["num_module_steps_trained"] == 100 * BATCH
    assert max_diff(before, jax.device_get(algo.state.params)) > 0
    algo.stop()
