"""Algorithms end to end: expert Parquet data -> BC -> evaluation; exact resume and
checkpoints for every algorithm of `learner_testlib.ALGORITHM_CASES`; streaming data;
connector state trained and saved; configs validated before anything compiles; the registry;
continuous actions (Pendulum)."""

import gymnasium as gym
import jax
import numpy as np
import pytest
from learner_testlib import OFFLINE_ALGORITHM_CASES, case_ids, with_slow_marks
from offline_rl_testlib import assert_resume_is_exact

from rljax_offline import Algorithm, BCConfig, ConfigError, MARWILConfig
from rljax_offline.acting.env_runner import EnvRunner, record_expert
from rljax_offline.algorithms import AlgorithmConfig, config_class, names, register
from rljax_offline.connectors import frame_stack, mean_std_filter


@pytest.fixture(scope="module")
def cartpole_data(tmp_path_factory):
    path = tmp_path_factory.mktemp("cartpole")
    record_expert("CartPole-v1", str(path), num_episodes=60, progress=False,
                  output_max_rows_per_file=20)
    return str(path)


@pytest.fixture(scope="module")
def pendulum_data(tmp_path_factory):
    path = tmp_path_factory.mktemp("pendulum")
    record_expert("Pendulum-v1", str(path), num_episodes=6, progress=False)
    return str(path)


def config(data, **training):
    return (BCConfig().environment("CartPole-v1").offline_data(input_=data)
            .training(**{"num_updates_per_iteration": 50, "lr": 1e-3, **training})
            .learners(num_devices=1)
            .evaluation(evaluation_interval=0, evaluation_duration=5))


def test_bc_reaches_450_on_cartpole(cartpole_data):
    algo = config(cartpole_data).evaluation(evaluation_interval=1).build()
    best = 0.0
    for _ in range(8):
        result = algo.train()
        best = max(best, result["evaluation"]["env_runners"]["episode_return_mean"])
        if best >= 450:
            break
    assert best >= 450
    learner = result["learners"]["default_policy"]
    assert learner["num_module_steps_trained"] == 50 * 1024 and learner["policy_loss"] > 0
    assert set(result["evaluation"]["env_runners"]) >= {"episode_return_mean",
                                                        "episode_return_min",
                                                        "episode_return_max",
                                                        "episode_len_mean"}
    actions = algo.compute_actions(np.zeros((3, 4), np.float32))
    assert actions.shape == (3,)
    algo.stop()


@pytest.mark.parametrize("case", with_slow_marks(OFFLINE_ALGORITHM_CASES),
                         ids=case_ids(OFFLINE_ALGORITHM_CASES))
def test_resume_is_exact_for_every_algorithm(case, cartpole_data, pendulum_data, tmp_path):
    """Every offline algorithm resumes bit for bit (`offline_rl_testlib.assert_resume_is_exact`)
    on two devices."""
    _, base, (obs_space, _) = case
    env, data = (("CartPole-v1", cartpole_data) if obs_space.shape == (4,)
                 else ("Pendulum-v1", pendulum_data))
    assert_resume_is_exact(
        base.environment(env).offline_data(input_=data)
        .training(num_updates_per_iteration=5, train_batch_size_per_learner=64)
        .learners(num_devices=2).evaluation(evaluation_interval=0), tmp_path)


def test_checkpoint_without_config_and_bad_checkpoint(cartpole_data, tmp_path):
    algo = config(cartpole_data).build()
    algo.train()
    algo.save(str(tmp_path / "c"))
    again = Algorithm.from_checkpoint(str(tmp_path / "c"))
    assert again.iteration == 1
    with pytest.raises(FileNotFoundError, match="not a checkpoint"):
        Algorithm.from_checkpoint(str(tmp_path))
    other = config(cartpole_data).rl_module(model_config={"fcnet_hiddens": [8]}).build()
    with pytest.raises(ValueError, match="does not match"):
        other.restore(str(tmp_path / "c"))
    marwil = MARWILConfig().environment("CartPole-v1").offline_data(input_=cartpole_data).build()
    with pytest.raises(ValueError, match="holds a 'bc' algorithm"):
        marwil.restore(str(tmp_path / "c"))


def test_streaming_data_trains(cartpole_data):
    algo = config(cartpole_data, num_updates_per_iteration=20).offline_data(
        materialize_data=False, materialize_mapped_data=False, shuffle_buffer_size=16,
        input_read_batch_size=8).build()
    losses = [algo.train()["learners"]["default_policy"]["policy_loss_mean"]
              for _ in range(3)]
    assert losses[-1] < losses[0]


def test_streaming_on_eight_devices_fits_the_connector_state(cartpole_data):
    algo = (config(cartpole_data, num_updates_per_iteration=5,
                   learner_connector=lambda spaces: [mean_std_filter(as_learner_connector=True)])
            .offline_data(materialize_data=False, materialize_mapped_data=False,
                          shuffle_buffer_size=4, input_read_batch_size=4)
            .learners(num_devices=8).build())
    counts = []
    for _ in range(2):
        result = algo.train()
        counts.append(float(jax.device_get(algo.state.connector_state[0][0].count)))
    assert result["learners"]["default_policy"]["num_module_steps_trained"] == 5 * 1024
    assert 5 * 1024 <= counts[0] < counts[1]


def test_mean_std_filter_and_frame_stack_train_save_and_act(cartpole_data, tmp_path):
    cfg = (config(cartpole_data)
           .training(learner_connector=lambda spaces: [
               frame_stack(2), mean_std_filter(as_learner_connector=True)])
           .env_runners(episode_lookback_horizon=1)
           .evaluation(evaluation_interval=1, evaluation_duration=3))
    algo = cfg.build()
    assert algo.learner_connector.out_spaces(algo.spaces).observation.shape == (8,)
    result = algo.train()
    stats = jax.device_get(algo.state.connector_state[0][1])
    assert float(stats.count) > 1000 and np.all(np.asarray(stats.m2) > 0)
    assert result["evaluation"]["env_runners"]["num_episodes"] == 3
    algo.save(str(tmp_path / "c"))
    with pytest.raises(ValueError, match="custom connector pieces"):
        Algorithm.from_checkpoint(str(tmp_path / "c"))
    back = Algorithm.from_checkpoint(str(tmp_path / "c"), cfg)
    np.testing.assert_array_equal(jax.device_get(back.state.connector_state[0][1].mean),
                                  stats.mean)


def test_config_is_immutable_and_validated():
    base = BCConfig()
    new = base.training(lr=3e-4)
    assert base.lr == 1e-4 and new.lr == 3e-4  # RLlib's BC default
    with pytest.raises(ConfigError, match="train_batch_size_per_learner must be a positive int"):
        base.training(train_batch_size_per_learner=0)
    with pytest.raises(ConfigError, match="lr must be a finite number > 0, got 'fast'"):
        base.training(lr="fast")
    with pytest.raises(ConfigError, match="lr must be a finite number > 0, got nan"):
        base.training(lr=float("nan"))
    with pytest.raises(ConfigError, match="on_bad_file"):
        base.offline_data(on_bad_file="ignore")
    with pytest.raises(ConfigError, match="model_config"):
        base.rl_module(model_config={"bogus": 1})
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['min_q_weight'\]; valid: "):
        base.training(min_q_weight=5.0)
    with pytest.raises(ConfigError, match="beta must be 0.0"):
        base.training(beta=1.0)
    with pytest.raises(ConfigError, match="beta must be a finite number >= 0"):
        MARWILConfig().training(beta=-1.0)
    with pytest.raises(ConfigError, match="gamma must be a number in \\[0, 1\\]"):
        MARWILConfig().training(gamma=1.5)
    with pytest.raises(ConfigError, match="no offline data"):
        base.build().train()


def test_unsupported_action_space_is_named_before_compiling():
    env = lambda cfg: _MultiDiscreteEnv()
    with pytest.raises(ConfigError, match="supports Discrete and Box action spaces"):
        MARWILConfig().environment(env).build()


class _MultiDiscreteEnv(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.MultiDiscrete([2, 3])


def test_registry_names_and_user_algorithms():
    assert {"bc", "marwil"} <= set(names())
    assert config_class("marwil") is MARWILConfig
    with pytest.raises(KeyError, match="unknown algorithm 'nope'; known:"):
        config_class("nope")
    with pytest.raises(TypeError, match="AlgorithmConfig subclass"):
        register("mine", dict)

    class Mine(BCConfig):
        algo_name = "mine"

    register("mine", Mine)
    assert config_class("mine") is Mine and "mine" in names()
    assert issubclass(Mine, AlgorithmConfig)


def test_every_registered_algorithm_is_in_the_cross_cutting_cases():
    """The cross-cutting cases follow from the registry: each algorithm on every action space
    it accepts; one it leaves out is refused by a named error before anything compiles."""
    from learner_testlib import ALGORITHM_CASES, BOX, DISCRETE, accepts

    from rljax_offline import spaces as sp
    from rljax_offline.errors import RljaxError

    for name in names():
        ids = {c[0] for c in ALGORITHM_CASES if c[0].rsplit("-", 1)[0] == name}
        assert ids, f"{name} runs in no cross-cutting case"
        for kind, spaces in (("discrete", DISCRETE), ("box", BOX)):
            if f"{name}-{kind}" not in ids:
                assert not accepts(config_class(name)(), spaces)
                with pytest.raises(RljaxError):
                    config_class(name)().check_spaces(*map(sp.to_spec, spaces))


def test_marwil_trains_value_function_on_cartpole(cartpole_data):
    algo = (MARWILConfig().environment("CartPole-v1").offline_data(input_=cartpole_data)
            .training(lr=1e-3, num_updates_per_iteration=100, train_batch_size_per_learner=256)
            .learners(num_devices=1).evaluation(evaluation_interval=0)).build()
    first = algo.train()["learners"]["default_policy"]
    for _ in range(3):
        last = algo.train()["learners"]["default_policy"]
    assert last["vf_loss"] < 0.5 * first["vf_loss_mean"], (first, last)
    assert {"policy_loss", "vf_loss", "total_loss", "moving_avg_sqd_adv_norm",
            "gradients_default_optimizer_global_norm"} <= set(last)


@pytest.mark.slow
def test_pendulum_bc_within_20_percent_of_expert(tmp_path):
    from rljax_offline.acting.experts import pendulum_expert

    record_expert("Pendulum-v1", str(tmp_path), num_episodes=100, progress=False)
    expert = EnvRunner("Pendulum-v1", pendulum_expert, num_envs=10, seed=123).evaluate(20)
    algo = (BCConfig().environment("Pendulum-v1").offline_data(input_=str(tmp_path))
            .training(num_updates_per_iteration=500, lr=1e-3)
            .evaluation(evaluation_interval=0, evaluation_duration=20, evaluation_num_envs=10)
            .build())
    for _ in range(6):
        algo.train()
    bc = algo.evaluate(20)
    assert bc["episode_return_mean"] >= 1.2 * expert["episode_return_mean"], (bc, expert)
