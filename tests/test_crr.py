"""CRR: d3rlpy's names and defaults, the exponential (clipped) and binary advantage weights,
V as the mean or max over policy samples, hard or soft targets of Q and policy, the one-line
refusals, exact resume, the critic-weighted acting (d3rlpy's `predict`) and a short learning
run on mixed Pendulum data that fails without the advantage weights.

(8 devices == 1, the three update modes, masked rows, checkpoints: the cross-cutting tests.)"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from learner_testlib import max_diff
from offline_rl_testlib import (
    assert_resume_is_exact,
    evaluation_returns,
    level,
    run_updates,
    spec_of,
)
from zoo_testlib import ACT, OBS, SMALL, N, assert_one_line_config_error, box_refusals
from zoo_testlib import pendulum_config as zoo_pendulum_config
from zoo_testlib import random_batch as zoo_batch

from rljax_offline import spaces as sp
from rljax_offline.algorithms.crr import CRRConfig
from rljax_offline.learning.init import init_state
from rljax_offline.learning.update import BatchAxis
from rljax_offline.models.actor_and_q import tanh_mean_actor
from rljax_offline.models.initializers import TORCH_DEFAULT
from rljax_offline.models.networks import continuous_q_network, ensemble


def random_batch(n=N, seed=0):
    return zoo_batch(n, seed, action_bound=1.9)


def test_d3rlpy_defaults():
    c = CRRConfig()
    assert (c.beta, c.n_action_samples, c.advantage_type, c.weight_type, c.max_weight) == (
        1.0, 4, "mean", "exp", 20.0)
    assert (c.n_critics, c.target_update_type, c.target_update_interval, c.tau) == (
        1, "hard", 100, 0.005)
    assert (c.train_batch_size_per_learner, c.gamma, c.actor_lr, c.critic_lr, c.algo_name) == (
        100, 0.99, 3e-4, 3e-4, "crr")
    assert c.action_selection == "critic_weighted"
    assert c.model_config == {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu",
                              **TORCH_DEFAULT}


@pytest.mark.parametrize("change, spaces, message", [
    *box_refusals("CRRConfig"),
    (lambda c: c.training(weight_type="linear"), None, "weight_type must be"),
    (lambda c: c.training(advantage_type="median"), None, "advantage_type must be"),
    (lambda c: c.training(action_selection="argmax"), None, "action_selection must be"),
])
def test_what_it_cannot_do_is_a_one_line_config_error(change, spaces, message):
    assert_one_line_config_error(CRRConfig(), change, spaces, message)


@pytest.mark.parametrize("weight_type", ["exp", "binary"])
def test_weights_are_the_clipped_exponential_or_the_sign_of_the_advantage(weight_type):
    config = CRRConfig().training(weight_type=weight_type, beta=0.5, max_weight=3.0,
                                  advantage_type="max").rl_module(model_config=SMALL)
    spec = spec_of(config, OBS, ACT)
    params = jax.device_get(init_state(spec.learning, 0).params)
    actor = next(loss for loss in spec.learning.losses if loss.name == "actor")
    per_example, metrics = actor.fn(params, random_batch(),
                                    jax.random.split(jax.random.PRNGKey(0), N), BatchAxis())
    adv, w = np.asarray(metrics["advantage_mean"]), np.asarray(metrics["advantage_weight_mean"])
    expected = (adv > 0).astype(np.float32) if weight_type == "binary" else np.minimum(
        np.exp(adv / 0.5), 3.0)
    np.testing.assert_allclose(w, expected, rtol=1e-5)
    np.testing.assert_allclose(per_example, -w * np.asarray(metrics["logp"]), rtol=1e-5)
    assert 0 < np.mean(adv > 0) < 1  # both sides of the advantage occur


def test_hard_targets_copy_both_networks_every_interval():
    config = CRRConfig().training(target_update_interval=2).rl_module(model_config=SMALL)
    (s1, _), (s2, _) = run_updates(spec_of(config, OBS, ACT), random_batch(), 1, 2)
    p1, p2 = s1.params, s2.params
    for target, online in (("target_q", "q"), ("target_policy", "policy")):
        assert max_diff(p1[target], p1[online]) > 0  # update 1: left as they were
        assert max_diff(p2[target], p2[online]) == 0.0  # update 2: a copy


def test_d3rlpy_actor_takes_its_log_std_from_the_network():
    config = CRRConfig().training(actor_tanh_mean=True).rl_module(model_config=SMALL)
    state, metrics = run_updates(spec_of(config, OBS, ACT), random_batch(), 1)
    assert set(state.params["policy"]) == {"net"} and np.isfinite(float(metrics["logp"]))
    policy = tanh_mean_actor(sp.to_spec(OBS), sp.to_spec(ACT), SMALL, log_std_min=-20.0,
                             log_std_max=2.0, std_from_network=True)
    inputs = np.asarray(policy.apply(state.params["policy"], random_batch()["obs"]))
    assert policy.dist.kind == "tanh_mean_gaussian"
    assert np.std(inputs[:, 1]) > 0  # the log-std differs from state to state


def pendulum_config(data, updates, **training):
    return zoo_pendulum_config(CRRConfig, data, updates, train_batch_size_per_learner=256,
                               actor_lr=1e-3, critic_lr=1e-3, **training)


def test_resume_is_exact(pendulum_mixed, tmp_path):
    assert_resume_is_exact(pendulum_config(pendulum_mixed, 4).evaluation(
        evaluation_interval=0), tmp_path)


@pytest.mark.slow
def test_learns_mixed_pendulum_where_its_weights_matter(pendulum_mixed):
    """10% expert, 90% random-torque Pendulum episodes (behavior cloning stays near -1,050),
    6,000 updates of batch 256 at learning rates 1e-3: the level (mean of the last two
    evaluations) clears -550 (measured -355 and -357 for seeds 0 and 1). Without the
    advantage weights (`beta=1e6`: every weight 1, behavior cloning, the critic-weighted
    acting left on) the same run ends at -713; acting greedily, -593 and -558 with the
    weights and -1,011 without."""
    returns = evaluation_returns(pendulum_config(pendulum_mixed, 1000), 6)
    assert level(returns) >= -550, returns


def test_critic_weighted_acting_resamples_actor_draws_by_the_critic():
    """Acting draws `n_action_samples` actor actions per state and picks one by softmax(Q):
    with Q scaled up (softmax near argmax) the picked actions' mean Q is the best of 4
    draws', above one draw's; the picks vary with the key, inside the bounds. `"greedy"`
    acts with `tanh(mean)` whatever the key."""
    config = CRRConfig().rl_module(model_config=SMALL)
    spec = spec_of(config, OBS, ACT)
    params = jax.device_get(init_state(spec.learning, 0).params)
    params["q"] = jax.tree_util.tree_map(lambda x: 30.0 * x, params["q"])
    q = ensemble(continuous_q_network(sp.to_spec(OBS), sp.to_spec(ACT), config.model_config), 1)
    obs = jnp.tile(jnp.asarray([[0.3, -0.2, 0.5]], jnp.float32), (4000, 1))
    acting = spec.acting
    assert acting.takes_key

    def act(policy_spec, key):
        inputs = policy_spec.act_with_key(params, key, obs)
        return policy_spec.dist.greedy(inputs)

    picked = act(acting, jax.random.PRNGKey(1))
    assert picked.shape == (4000, 1) and float(jnp.abs(picked).max()) <= 2.0
    assert float(jnp.std(picked)) > 0.05  # a draw, not one action
    q_picked = float(jnp.mean(q.apply(params["q"], obs, picked)))
    greedy = spec_of(config.training(action_selection="greedy"), OBS, ACT).acting
    actor_inputs = greedy.act_with_key(params, None, obs)
    one_draw = greedy.dist.sample(actor_inputs, jax.random.PRNGKey(2))
    q_one = float(jnp.mean(q.apply(params["q"], obs, one_draw)))
    spread = float(jnp.std(q.apply(params["q"], obs, one_draw)))
    assert spread > 0.1 and q_picked > q_one + 0.3 * spread, (q_picked, q_one, spread)
    np.testing.assert_array_equal(greedy.dist.greedy(actor_inputs),
                                  greedy.dist.greedy(greedy.act_with_key(
                                      params, jax.random.PRNGKey(9), obs)))
    assert not greedy.takes_key


def test_compute_actions_draws_afresh_on_each_call():
    """A policy that draws when it acts, called once a step, draws anew each step (the same
    key on every call would repeat one draw: a biased policy in a loop of calls)."""
    obs = np.random.default_rng(0).uniform(-1, 1, (16, 3)).astype(np.float32)
    picks = {}
    for selection in ("critic_weighted", "greedy"):
        algo = (CRRConfig().environment("Pendulum-v1").rl_module(model_config=SMALL)
                .training(action_selection=selection).learners(num_devices=1)).build()
        picks[selection] = [algo.compute_actions(obs) for _ in range(2)]
        algo.stop()
    assert not np.allclose(*picks["critic_weighted"])
    np.testing.assert_array_equal(*picks["greedy"])
