"""AWAC: d3rlpy's names and defaults, the advantage weights normalized over the global batch
(masked rows left out, no overflow), the one-line refusals, exact resume and a short learning
run on mixed Pendulum data that fails without the advantage weights.

(8 devices == 1, the three update modes, masked rows, checkpoints: the cross-cutting tests.)"""

import jax
import numpy as np
import pytest
from offline_rl_testlib import assert_resume_is_exact, evaluation_returns, level, spec_of
from zoo_testlib import (
    ACT,
    OBS,
    N,
    assert_export_acts_as_the_algorithm,
    assert_one_line_config_error,
    box_refusals,
    keys,
    random_batch,
)
from zoo_testlib import pendulum_config as zoo_pendulum_config

from rljax_offline.algorithms.awac import AWACConfig
from rljax_offline.learning.init import init_state
from rljax_offline.learning.losses import batch_softmax_weights
from rljax_offline.learning.update import BatchAxis
from rljax_offline.models.initializers import TORCH_DEFAULT


def test_d3rlpy_defaults():
    c = AWACConfig()
    assert (c.lam, c.n_action_samples, c.n_critics, c.actor_lr, c.critic_lr) == (
        1.0, 1, 2, 3e-4, 3e-4)
    assert (c.train_batch_size_per_learner, c.gamma, c.tau, c.lr, c.algo_name) == (
        1024, 0.99, 0.005, None, "awac")
    assert c.model_config == {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu",
                              **TORCH_DEFAULT}
    assert c.actor_tanh_mean is True


def test_d3rlpy_actor_is_a_gaussian_around_tanh_mean_with_one_bounded_std():
    """The default actor, d3rlpy's: its log-std one parameter per action dimension in
    [-6, 0] (-3 at the start), whatever the state; greedy acting is tanh(mean)."""
    config = AWACConfig().rl_module(
        model_config={"fcnet_hiddens": [16]})
    spec = spec_of(config, OBS, ACT)
    params = jax.device_get(init_state(spec.learning, 0).params)
    assert set(params["policy"]) == {"net", "log_std"}
    obs = np.random.default_rng(0).uniform(-1, 1, (N, 3)).astype(np.float32)
    inputs = np.asarray(spec.acting.act(params, obs))
    np.testing.assert_allclose(inputs[:, 1], -3.0, rtol=1e-6)
    params["policy"]["log_std"] = params["policy"]["log_std"] + 50.0
    np.testing.assert_allclose(np.asarray(spec.acting.act(params, obs))[:, 1], 0.0, atol=1e-6)
    assert spec.acting.dist.kind == "tanh_mean_gaussian"
    greedy = np.asarray(spec.acting.dist.greedy(inputs))
    np.testing.assert_allclose(greedy[:, 0], 2.0 * np.tanh(inputs[:, 0]), rtol=1e-5)


@pytest.mark.parametrize("change, spaces, message", [
    *box_refusals("AWACConfig", recurrent="use_gru"),
    (lambda c: c.training(lam=0.0), None, "lam must be"),
])
def test_what_it_cannot_do_is_a_one_line_config_error(change, spaces, message):
    assert_one_line_config_error(AWACConfig(), change, spaces, message)


def test_weights_are_the_batch_softmax_times_its_size_without_the_masked_rows():
    x = np.array([1000.0, 999.0, 998.0, 5000.0, 0.0], np.float32)  # exp(1000) overflows
    mask = np.array([1, 1, 1, 0, 1], np.float32)
    w = np.asarray(batch_softmax_weights(x, mask, BatchAxis()))
    e = np.exp(x[[0, 1, 2, 4]] - 1000.0)
    np.testing.assert_allclose(w[[0, 1, 2, 4]], 4 * e / e.sum(), rtol=1e-6)
    assert w[3] == 0.0 and np.all(np.isfinite(w))


def test_actor_loss_is_the_weighted_log_likelihood_of_the_data_actions():
    config = AWACConfig().rl_module(model_config={"fcnet_hiddens": [16]})
    spec = spec_of(config, OBS, ACT)
    params = jax.device_get(init_state(spec.learning, 0).params)
    rng = np.random.default_rng(0)
    batch = {"obs": rng.uniform(-1, 1, (N, 3)).astype(np.float32),
             "actions": rng.uniform(-1.9, 1.9, (N, 1)).astype(np.float32),
             "loss_mask": np.ones(N, np.float32)}
    actor = next(loss for loss in spec.learning.losses if loss.name == "actor")
    per_example, metrics = actor.fn(params, batch, jax.random.split(jax.random.PRNGKey(0), N),
                                    BatchAxis())
    logp = np.asarray(metrics["logp"])
    weights = np.asarray(per_example) / -logp
    np.testing.assert_allclose(weights.mean(), 1.0, rtol=1e-4)  # normalized to mean 1
    adv = np.asarray(metrics["advantage_mean"])
    np.testing.assert_allclose(weights, N * np.exp(adv - adv.max()) / np.exp(
        adv - adv.max()).sum(), rtol=1e-4)


def test_d3rlpy_target_subtracts_the_squashed_draws_log_density():
    """`d3rlpy_target=True` (the swap for d3rlpy's AWAC target): with the actor's std at its
    floor e^-6 both targets draw a' = tanh(mean(s')) to within the std, so they differ by
    -gamma * (1 - d) times the squashed Gaussian's log-density of the draw, in the unit box:
    -z^2 / 2 - log std - log(2 pi) / 2 - log(1 - tanh(mean)^2) a dimension, z ~ N(0, 1) the
    draw's noise. What is left after the rest is z^2 / 2: never negative, mean 1/2."""
    config = AWACConfig().rl_module(model_config={"fcnet_hiddens": [16]})
    batch = random_batch()
    targets = []
    for d3rlpy_target in (False, True):
        spec = spec_of(config.training(d3rlpy_target=d3rlpy_target), OBS, ACT)
        params = jax.device_get(init_state(spec.learning, 0).params)
        params["policy"]["log_std"] = params["policy"]["log_std"] - 50.0  # log-std -6
        critic = next(loss for loss in spec.learning.losses if loss.name == "critic")
        _, metrics = critic.fn(params, batch, keys(), BatchAxis())
        targets.append(np.asarray(metrics["td_target_mean"], np.float64))
    mean = np.asarray(spec.acting.act(params, batch["new_obs"]))[:, 0].astype(np.float64)
    logp = 6.0 - 0.5 * np.log(2 * np.pi) - np.log(1.0 - np.tanh(mean) ** 2 + 1e-6)
    live = ~batch["terminateds"]
    np.testing.assert_array_equal(targets[1][~live], targets[0][~live])  # no next state
    half_z2 = (targets[1] - targets[0])[live] / 0.99 + logp[live]
    assert half_z2.min() > -0.01 and logp.min() > 4.0  # the term is there to see
    # z^2 / 2 has std 1 / sqrt(2): the mean of the 50-odd rows is 1/2 to within 4 errors
    assert abs(half_z2.mean() - 0.5) < 4 * 0.71 / np.sqrt(live.sum())


def pendulum_config(data, updates, **training):
    return zoo_pendulum_config(AWACConfig, data, updates, train_batch_size_per_learner=256,
                               actor_lr=1e-3, critic_lr=1e-3, **training)


def test_resume_is_exact(pendulum_mixed, tmp_path):
    assert_resume_is_exact(pendulum_config(pendulum_mixed, 4).evaluation(
        evaluation_interval=0), tmp_path)


@pytest.mark.slow
def test_learns_mixed_pendulum_where_its_weights_matter(pendulum_mixed):
    """10% expert, 90% random-torque Pendulum episodes (behavior cloning stays near -1,050),
    6,000 updates of batch 256 at learning rates 1e-3: the level (mean of the last two
    evaluations) clears -700 (measured -152 and -201 for seeds 0 and 1; -252 and -201 with
    the squashed actor). Without the advantage weights (`lam=1e6`: every weight 1, behavior
    cloning) the same run ends at -1,218 (squashed: -1,010)."""
    returns = evaluation_returns(pendulum_config(pendulum_mixed, 1000), 6)
    assert level(returns) >= -700, returns


def test_exported_policy_acts_as_the_algorithm(pendulum_mixed, tmp_path):
    """Export follows from the registry line too: the StableHLO policy's actions are the
    algorithm's greedy ones (the actor's tanh(mean), scaled to the bounds)."""
    algo = pendulum_config(pendulum_mixed, 2).rl_module(
        model_config={"fcnet_hiddens": [16]}).evaluation(evaluation_interval=0).build()
    algo.train()
    assert_export_acts_as_the_algorithm(algo, tmp_path / "policy.stablehlo")
    algo.stop()
