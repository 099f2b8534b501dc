"""BEAR: d3rlpy's names and defaults, the MMD estimate and its kernels, the multiplier kept in
range, the warm-up phase (the actor minimizes the MMD term alone, temperature and multiplier
held), candidates drawn with the acting key, the one-line refusals, export, and a learning
run on mixed Pendulum that fails without the MMD constraint.

(8 devices == 1, the three update modes, masked rows, exact resume, OPE: the cross-cutting
tests from the registry line; their settings are in `learner_testlib.CASE_TRAINING`.)"""

import gymnasium as gym
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from learner_testlib import max_diff
from offline_rl_testlib import evaluation_returns, level, run_updates, spec_of
from zoo_testlib import (
    ACT,
    OBS,
    SMALL,
    assert_acting_follows_the_key,
    assert_export_acts_with_a_fixed_key,
    pendulum_config,
    random_batch,
)

from rljax_offline.algorithms.bear import BEARConfig, clamped, mmd
from rljax_offline.algorithms.config import ConfigError
from rljax_offline.learning.init import init_state


def test_d3rlpy_defaults():
    c = BEARConfig()
    assert (c.actor_lr, c.critic_lr, c.imitator_lr, c.temp_lr, c.alpha_lr) == (
        1e-4, 3e-4, 3e-4, 1e-4, 1e-3)
    assert (c.train_batch_size_per_learner, c.gamma, c.tau, c.n_critics) == (256, 0.99, 5e-3, 2)
    assert (c.initial_temperature, c.initial_alpha, c.alpha_threshold, c.lam) == (
        1.0, 1.0, 0.05, 0.75)
    assert (c.n_action_samples, c.n_target_samples, c.n_mmd_action_samples) == (100, 10, 4)
    assert (c.mmd_kernel, c.mmd_sigma, c.vae_kl_weight, c.warmup_steps) == (
        "laplacian", 20.0, 0.5, 40000)
    assert c.model_config["fcnet_hiddens"] == [256, 256]


@pytest.mark.parametrize("change, spaces, message", [
    ({}, (OBS, gym.spaces.Discrete(2)), "BEARConfig needs Box actions"),
    ({}, (OBS, gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)), "bound"),
])
def test_what_it_cannot_do_is_a_one_line_config_error(change, spaces, message):
    with pytest.raises(ConfigError, match=message):
        spec_of(BEARConfig().training(**change), *spaces)
    with pytest.raises(ConfigError, match="BEARConfig: lr is not used"):
        BEARConfig().training(lr=1e-3)
    with pytest.raises(ConfigError, match="BEARConfig has no recurrent form"):
        BEARConfig().rl_module(model_config={"use_lstm": True})
    with pytest.raises(ConfigError, match="mmd_kernel must be one of"):
        BEARConfig().training(mmd_kernel="cosine")


@pytest.mark.parametrize("kernel", ["laplacian", "gaussian"])
def test_mmd_matches_the_kernel_sums(kernel):
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-1, 1, (2, 4, 2)), rng.uniform(-1, 1, (2, 3, 2))
    sigma = 0.7

    def k(a, b):
        d = np.abs(a - b).sum() if kernel == "laplacian" else ((a - b) ** 2).sum()
        return np.exp(-d / (2 * sigma))

    want = [np.sqrt(np.mean([k(a, b) for a in xs for b in xs])
                    + np.mean([k(a, b) for a in ys for b in ys])
                    - 2 * np.mean([k(a, b) for a in xs for b in ys]) + 1e-6)
            for xs, ys in zip(x, y)]
    np.testing.assert_allclose(mmd(jnp.asarray(x), jnp.asarray(y), kernel, sigma), want,
                               rtol=1e-5)
    same = mmd(jnp.asarray(x), jnp.asarray(x), kernel, sigma)
    np.testing.assert_allclose(same, 1e-3, rtol=1e-2)  # sqrt(0 + 1e-6)


def test_clamped_keeps_the_parameter_in_range():
    opt = clamped(optax.sgd(10.0), -5.0, 10.0)
    p = jnp.asarray(9.0)
    state = opt.init(p)
    for grad, want in ((-1.0, 10.0), (-1.0, 10.0), (2.0, -5.0), (0.05, -5.0), (-0.2, -3.0)):
        u, state = opt.update(jnp.asarray(grad), state, p)
        p = optax.apply_updates(p, u)
        assert float(p) == pytest.approx(want)


def test_warmup_trains_the_actor_on_the_mmd_alone_then_everything():
    """For `warmup_steps` updates the actor's MMD-only optimizer runs and the temperature,
    the multiplier and the SAC actor's optimizer skip; afterwards the reverse."""
    spec = spec_of(BEARConfig().training(warmup_steps=2, n_action_samples=3,
                                         n_target_samples=3)
                   .rl_module(model_config=SMALL), OBS, ACT)
    start = init_state(spec.learning, 0)
    (warm, _), (after, metrics) = run_updates(spec, random_batch(), 2, 4)
    assert float(warm.params["log_temp"]) == float(start.params["log_temp"]) == 0.0
    assert float(warm.params["log_alpha"]) == 0.0
    assert float(after.params["log_temp"]) != 0.0 and float(after.params["log_alpha"]) != 0.0
    assert max_diff(warm.params["policy"], start.params["policy"]) > 0.0  # the MMD term
    assert {"mmd", "policy_loss", "qf_loss", "vae_loss", "temp", "alpha"} <= set(metrics)


def test_acting_draws_its_candidates_from_the_key():
    spec = spec_of(BEARConfig().training(n_action_samples=5).rl_module(model_config=SMALL),
                   OBS, ACT)
    params = init_state(spec.learning, 0).params
    obs = np.random.default_rng(1).uniform(-1, 1, (256, 3)).astype(np.float32)
    assert_acting_follows_the_key(
        lambda k, o: spec.acting.dist.greedy(spec.acting.act(params, k, o)), obs)


def test_exported_policy_acts_with_a_fixed_key(pendulum_mixed, tmp_path):
    algo = pendulum_config(BEARConfig, pendulum_mixed, 2, n_action_samples=5).rl_module(
        model_config=SMALL).evaluation(evaluation_interval=0).build()
    algo.train()
    assert_export_acts_with_a_fixed_key(algo, tmp_path / "policy.stablehlo")
    algo.stop()


@pytest.mark.slow
def test_learns_mixed_pendulum_where_its_mmd_constraint_matters(pendulum_mixed):
    """10% expert, 90% random-torque Pendulum episodes (behavior cloning stays near -1,050),
    4,000 updates (about 30 s) at d3rlpy's defaults but a warm-up of 1,000 updates (d3rlpy's
    40,000) and 10 acting candidates, 64-64 networks: the level (mean of the last two
    evaluations) clears -950 (measured -831 with the MMD before the tanh, d3rlpy's space and
    our default; -716 on the actions, `mmd_space="actions"`). Tried once without the MMD
    constraint (`.training(alpha_threshold=100.0, initial_alpha=0.0067)`: the multiplier at
    its floor from the start, SAC with BEAR's target and acting), the same run ends at -982
    (-1,122 on the actions) and fails the threshold; that run is not repeated here (it
    doubled the test's time)."""
    bear = level(evaluation_returns(pendulum_config(
        BEARConfig, pendulum_mixed, 1000, warmup_steps=1000, n_action_samples=10), 4))
    print(bear)
    assert bear >= -950, bear
