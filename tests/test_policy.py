"""The policy: RLlib's default MLP shape, categorical and diagonal-Gaussian heads, observation
encoding, distribution helpers against closed forms, action clipping."""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from rljax_offline.models.policy import clip_to_bounds, make_policy


def test_mlp_layers_follow_fcnet_hiddens():
    policy = make_policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), (32, 16), "tanh")
    params = policy.init(jax.random.PRNGKey(0))
    shapes = [p.shape for p in jax.tree_util.tree_leaves(params["params"]) if p.ndim == 2]
    assert shapes == [(4, 32), (32, 16), (16, 2)]
    default = make_policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    kernels = [p.shape for p in jax.tree_util.tree_leaves(default.init(jax.random.PRNGKey(0)))
               if p.ndim == 2]
    assert kernels == [(4, 256), (256, 256), (256, 2)]
    with pytest.raises(ValueError, match="fcnet_activation"):
        make_policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), (8,), "sigmoidish")


def test_categorical_helpers():
    policy = make_policy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(4), (16,))
    params = policy.init(jax.random.PRNGKey(1))
    obs = jax.random.normal(jax.random.PRNGKey(2), (6, 3))
    logits = policy.apply(params, obs)
    probs = np.asarray(jax.nn.softmax(logits))
    acts = np.array([0, 1, 2, 3, 0, 1])
    np.testing.assert_allclose(policy.logp(params, obs, acts),
                               np.log(probs[np.arange(6), acts]), rtol=1e-5)
    np.testing.assert_allclose(policy.entropy(params, obs), stats.entropy(probs.T), rtol=1e-5)
    np.testing.assert_array_equal(policy.greedy_action(params, obs), probs.argmax(-1))
    samples = policy.sample_action(params, obs, jax.random.PRNGKey(3))
    assert samples.shape == (6,) and set(np.asarray(samples)) <= {0, 1, 2, 3}


def test_gaussian_helpers_and_state_dependent_log_std():
    policy = make_policy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (2,)), (16,))
    params = policy.init(jax.random.PRNGKey(0))
    # Make the head visibly state dependent, then check against scipy's normal.
    head = params["params"]["Dense_1"]
    params = {"params": {**params["params"], "Dense_1": {**head, "kernel": head["kernel"] * 30}}}
    obs = jax.random.normal(jax.random.PRNGKey(4), (5, 3))
    inputs = np.asarray(policy.apply(params, obs))
    mean, log_std = inputs[:, :2], np.clip(inputs[:, 2:], -20, 2)
    assert np.ptp(log_std[:, 0]) > 0  # log_std changes with the observation
    acts = mean + 0.3
    want = stats.norm(mean, np.exp(log_std)).logpdf(acts).sum(-1)
    np.testing.assert_allclose(policy.logp(params, obs, acts), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(policy.entropy(params, obs),
                               stats.norm(mean, np.exp(log_std)).entropy().sum(-1), rtol=1e-5)
    np.testing.assert_allclose(policy.greedy_action(params, obs), mean, rtol=1e-6)
    draws = policy.sample_action(params, jnp.repeat(obs[:1], 4000, 0), jax.random.PRNGKey(5))
    np.testing.assert_allclose(np.asarray(draws).mean(0), mean[0],
                               atol=4 * np.exp(log_std[0]).max() / np.sqrt(4000))


def test_clip_to_bounds():
    box = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 5.0], np.float32))
    np.testing.assert_array_equal(clip_to_bounds(box, jnp.array([[-3.0, 2.0], [0.5, 9.0]])),
                                  [[-1.0, 2.0], [0.5, 5.0]])
    np.testing.assert_array_equal(clip_to_bounds(gym.spaces.Discrete(3), jnp.array([7])), [7])


def test_discrete_observations_are_one_hot():
    policy = make_policy(gym.spaces.Discrete(5, start=1), gym.spaces.Discrete(2), (8,))
    params = policy.init(jax.random.PRNGKey(0))
    kernel = params["params"]["Dense_0"]["kernel"]
    assert kernel.shape == (5, 8)
    hidden = np.maximum(np.asarray(kernel)[2] + np.asarray(params["params"]["Dense_0"]["bias"]),
                        0)
    head = params["params"]["Dense_1"]
    np.testing.assert_allclose(policy.apply(params, np.array([3]))[0],
                               hidden @ head["kernel"] + head["bias"], rtol=1e-5)
    multi = make_policy(gym.spaces.MultiDiscrete([2, 3]), gym.spaces.Discrete(2), (8,))
    assert multi.init(jax.random.PRNGKey(0))["params"]["Dense_0"]["kernel"].shape == (5, 8)
    with pytest.raises(ValueError, match="flatten connector"):
        make_policy(gym.spaces.Tuple([gym.spaces.Discrete(2)]), gym.spaces.Discrete(2))


def test_policy_is_jit_friendly():
    policy = make_policy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), (8,))
    params = policy.init(jax.random.PRNGKey(0))
    obs = np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(jax.jit(policy.greedy_action)(params, obs),
                                  policy.greedy_action(params, obs))
