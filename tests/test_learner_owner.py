"""`learning.learner.Learner` owns the train state and the data-parallel runtime: `step(n)`
on materialized data gives the facade's updates exactly, and its state dict round-trips
through a checkpoint's template (`state_template`: shaped without compiling)."""

import jax
import numpy as np

from rljax_offline import BCConfig
from rljax_offline.acting.env_runner import record_expert
from rljax_offline.learning.learner import Learner


def _config(path):
    return (BCConfig().environment("CartPole-v1").offline_data(input_=path)
            .training(num_updates_per_iteration=5, train_batch_size_per_learner=32)
            .rl_module(model_config={"fcnet_hiddens": [8]}).evaluation(evaluation_interval=0))


def test_step_is_the_facades_update_and_the_state_dict_round_trips(tmp_path):
    record_expert("CartPole-v1", str(tmp_path / "d"), num_episodes=4, seed=0, progress=False)
    algo = _config(str(tmp_path / "d")).build()
    assert isinstance(algo.learner, Learner) and algo.dp is algo.learner.dp
    algo.train()
    own = Learner(algo.spec.learning, algo.devices, algo.rows_per_update,
                  mode=algo.config.update_mode, seed=algo.config.seed,
                  connector_state=algo.learner.initial_connector_state)
    metrics = own.step(5, algo.data.device_data)
    assert set(metrics) and all(np.isfinite(float(v)) for v in jax.device_get(metrics).values())
    for a, b in zip(jax.tree_util.tree_leaves(own.state_dict().params),
                    jax.tree_util.tree_leaves(algo.learner.state_dict().params)):
        np.testing.assert_array_equal(a, b)  # same seed, same data, same updates
    template = own.template()
    saved = own.state_dict()
    assert (jax.tree_util.tree_structure(template) == jax.tree_util.tree_structure(saved))
    assert all(np.shape(x) == np.shape(y) and np.asarray(x).dtype == np.asarray(y).dtype
               for x, y in zip(jax.tree_util.tree_leaves(template),
                               jax.tree_util.tree_leaves(saved)))
    own.load_state_dict(saved)
    assert int(own.state.step) == 5
    algo.stop()
