"""`algorithms.pipelines`, the one place an algorithm's pipelines are assembled: the columns a
recurrent policy's data keeps come from it (the spec its config made is not patched), PPO's
value warm-up assembles its pipeline with the same builder, and the env-to-module pipeline
acts with the learner's fitted state of each piece of the same name."""

import gymnasium as gym
import jax
import numpy as np
from conftest import FIXTURES

from rljax_offline import BCConfig, PPOConfig
from rljax_offline.algorithms import pipelines
from rljax_offline.connectors import Spaces, mean_std_filter, named_states, stateless

DATA = str(FIXTURES / "episodes")


def _bc(**training):
    return (BCConfig().environment("CartPole-v1").offline_data(input_=DATA)
            .training(train_batch_size_per_learner=64, num_updates_per_iteration=2, **training)
            .learners(num_devices=1, compilation_cache_dir=None)
            .evaluation(evaluation_interval=0))


def _spaces(config):
    env = gym.make(config.env)
    return Spaces.of(env.observation_space, env.action_space)


def test_recurrent_columns_come_from_the_pipelines_not_a_patched_spec():
    config = _bc().rl_module(model_config={"fcnet_hiddens": [8], "use_lstm": True,
                                           "lstm_cell_size": 4, "max_seq_len": 5})
    spec, built = pipelines.build(config, _spaces(config))
    assert "state_in" not in spec.data.columns
    assert built.columns[-3:] == pipelines.SEQUENCE_COLUMNS
    assert set(spec.data.columns) <= set(built.columns)


def test_value_warmup_uses_the_same_custom_pieces_and_defaults():
    config = PPOConfig().environment("CartPole-v1").training(
        learner_connector=lambda spaces: [mean_std_filter(as_learner_connector=True)])
    spaces = _spaces(config)
    _, built = pipelines.build(config, spaces)
    warm, out = pipelines.value_warmup(config, spaces)
    base = lambda pipe: list(named_states(pipe.pieces[0], pipe.pieces[0].init(spaces)))
    assert base(warm) == base(built.learner)
    assert out == built.learner.pieces[0].out_spaces(spaces)


def test_the_actor_acts_with_the_learners_fitted_filter_by_name():
    # The env-to-module pipeline has a piece in front that the learner's has not: by
    # position the filter's state would be the wrong one.
    config = _bc(learner_connector=lambda spaces: [mean_std_filter(as_learner_connector=True)])
    config = config.env_runners(env_to_module_connector=lambda spaces: [
        stateless(lambda e, b, c: (e, b)), mean_std_filter()])
    algo = config.build()
    algo.load_data()
    learned = jax.device_get(algo.state.connector_state)[0][0]
    assert float(learned.count) > 0
    acting = algo._e2m_state()
    jax.tree_util.tree_map(np.testing.assert_array_equal, acting[1], learned)
    algo.stop()
