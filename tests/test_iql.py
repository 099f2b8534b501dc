"""IQL: RLlib's names and defaults, the expectile loss, advantage weighting that prefers the
better of the data's actions where BC follows the majority, named errors, exact resume.

(8 devices == 1 and the three update modes: `learner_testlib.ALGORITHM_CASES`.)"""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from offline_rl_testlib import assert_resume_is_exact, run_updates, spec_of

from rljax_offline import IQLConfig
from rljax_offline.algorithms.config import ConfigError
from rljax_offline.algorithms.iql import MAX_ADVANTAGE_WEIGHT
from rljax_offline.apps.recipes import record_mixed
from rljax_offline.learning.losses import expectile_loss
from rljax_offline.learning.update import BatchAxis

OBS = gym.spaces.Box(-1, 1, (2,), np.float32)
SMALL = {"fcnet_hiddens": [32, 32]}
N = 200


def test_defaults_are_the_papers_and_rllibs_elsewhere():
    """beta, expectile and tau are the paper's (RLlib's 0.1, 0.8, 1.0 do not learn on the
    mixed Pendulum set: iql.py's docstring); the rest RLlib's."""
    c = IQLConfig()
    assert (c.beta, c.expectile, c.tau) == (3.0, 0.7, 0.005)
    assert (c.actor_lr, c.critic_lr, c.value_lr, c.lr) == (3e-4, 3e-4, 3e-4, None)
    assert (c.twin_q, c.target_network_update_freq, c.algo_name) == (True, 0, "iql")


def test_default_target_q_lags_the_online_q():
    """With RLlib's tau=1.0 every update the target is the online network itself."""
    spec = spec_of(IQLConfig().rl_module(model_config=SMALL), OBS, gym.spaces.Discrete(2))
    (start, _), (later, _) = run_updates(spec, two_action_batch(), 0, 3)
    leaves = [np.asarray(jax.tree_util.tree_leaves(later.params[k])[0])
              for k in ("q", "target_q")]
    moved = np.abs(leaves[0] - np.asarray(jax.tree_util.tree_leaves(start.params["q"])[0]))
    # After 3 Polyak steps the target has moved about 3 * tau of the online network's way.
    lag = np.abs(leaves[1] - np.asarray(jax.tree_util.tree_leaves(start.params["q"])[0]))
    assert lag.max() < 0.05 * moved.max(), (lag.max(), moved.max())


@pytest.mark.parametrize("kwargs, message", [
    ({"expectile": 1.0}, "expectile must be a number in \\(0, 1\\)"),
    ({"beta": 0.0}, "beta must be"), ({"lr": 1e-3}, "lr is not used"),
    ({"value_lr": "fast"}, "value_lr must be"),
])
def test_bad_values_are_one_line_named_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message) as e:
        IQLConfig().training(**kwargs)
    assert "\n" not in str(e.value)


def test_unbounded_box_needs_the_plain_gaussian_actor():
    unbounded = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    with pytest.raises(ConfigError, match="finite bounds"):
        spec_of(IQLConfig(), OBS, unbounded)
    spec = spec_of(IQLConfig().training(actor_squashed=False), OBS, unbounded)
    assert spec.acting.dist.dist_dim == 2


def test_expectile_loss_is_minimised_by_the_expectile():
    values = np.random.default_rng(0).normal(size=20_000).astype(np.float32)
    grid = np.linspace(-1, 2, 601)
    for tau in (0.5, 0.8, 0.9):
        losses = [float(jnp.mean(expectile_loss(jnp.asarray(values) - c, tau))) for c in grid]
        best = grid[int(np.argmin(losses))]
        # The tau-expectile e solves tau * E[(x-e)+] = (1-tau) * E[(e-x)+].
        e = grid[int(np.argmin([abs(tau * np.mean(np.maximum(values - c, 0)) -
                                    (1 - tau) * np.mean(np.maximum(c - values, 0)))
                                for c in grid]))]
        assert abs(best - e) <= grid[1] - grid[0]
        assert (best > 0.3) == (tau > 0.5)


def two_action_batch(seed=0):
    """One state kind, two actions: action 0 earns 1 and ends the episode, action 1 earns 0
    and ends it; 75% of the data takes action 1."""
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (N, 2)).astype(np.float32)
    actions = (rng.random(N) < 0.75).astype(np.int64)
    return {"obs": obs, "new_obs": obs, "actions": actions,
            "rewards": (actions == 0).astype(np.float32), "terminateds": np.ones(N, bool)}


def test_advantage_weights_pick_the_better_minority_action():
    batch = two_action_batch()
    # tau=1.0: the target follows at once, so 300 updates bring Q and V near their values.
    cfg = (IQLConfig().training(beta=10.0, expectile=0.9, actor_lr=3e-3, critic_lr=3e-3,
                                value_lr=3e-3, tau=1.0)
           .rl_module(model_config=SMALL))
    spec = spec_of(cfg, OBS, gym.spaces.Discrete(2))
    state, metrics = run_updates(spec, batch, 300)
    probs = np.asarray(jax.nn.softmax(spec.acting.act(state.params, jnp.asarray(batch["obs"]))))
    # BC would give action 0 a probability near 0.25; IQL puts most mass on it.
    assert np.all(probs[:, 0] > 0.6), probs[:4]
    # The weights themselves, row by row: the better action's rows weigh far more than the
    # other's (whose advantage is negative), and the metric is their mean.
    (policy_loss,) = [loss for loss in spec.learning.losses if loss.name == "policy"]
    _, aux = policy_loss.fn(state.params, {k: jnp.asarray(v) for k, v in batch.items()}, None,
                            BatchAxis())
    weight, better = np.asarray(aux["advantage_weight_mean"]), batch["actions"] == 0
    adv = np.asarray(aux["advantage_mean"])
    assert adv[better].mean() > 0.1 and adv[~better].mean() < -0.5
    assert np.median(weight[better]) > 100 * np.median(weight[~better]), weight[:8]
    assert np.all(weight <= MAX_ADVANTAGE_WEIGHT)
    np.testing.assert_allclose(float(metrics["advantage_weight_mean"]), weight.mean(), rtol=0.2)
    # V sits at the upper expectile of Q over the data's actions: near Q(s, 0) = 1.
    assert 0.5 < float(metrics["vf_mean"]) < 1.1
    assert set(metrics) >= {"vf_loss", "policy_loss", "qf_loss", "gradients_value_global_norm",
                            "gradients_policy_global_norm", "gradients_qf_global_norm"}


@pytest.mark.parametrize("recipe, episodes", [("cartpole-mixed-small", 20),
                                              ("pendulum-mixed-small", 3)])
def test_resume_is_exact(tmp_path, recipe, episodes):
    record_mixed(recipe, str(tmp_path / "data"), num_episodes=episodes)
    env = {"cartpole": "CartPole-v1", "pendulum": "Pendulum-v1"}[recipe.split("-")[0]]
    config = (IQLConfig().environment(env).offline_data(input_=str(tmp_path / "data"))
              .training(num_updates_per_iteration=4, train_batch_size_per_learner=64,
                        tau=0.5, target_network_update_freq=3)
              .rl_module(model_config={"fcnet_hiddens": [16]})
              .learners(num_devices=2 if env == "CartPole-v1" else 1)
              .evaluation(evaluation_interval=0))
    assert_resume_is_exact(config, tmp_path)


def test_tanh_mean_actor_is_d3rlpys_gaussian_around_tanh_mean():
    """`actor_tanh_mean`: N(tanh(mean), std) in the unit box, one learned log-std per action
    dimension (sigmoid into [-5, 2], -1.5 at the start), no tanh Jacobian in logp, so data
    actions on the bounds have a finite log-probability; greedy is tanh(mean) in env units."""
    box = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
    spec = spec_of(IQLConfig().training(actor_tanh_mean=True).rl_module(model_config=SMALL),
                   OBS, box)
    dist, policy = spec.acting.dist, spec.acting.policy
    params = policy.init(jax.random.PRNGKey(0))
    assert set(params) == {"net", "log_std"} and params["log_std"].shape == (2,)
    obs = np.array([[0.5, -0.5], [0.1, 0.9]], np.float32)
    inputs = policy.apply(params, obs)
    mean, log_std = np.split(np.asarray(inputs), 2, axis=-1)
    np.testing.assert_allclose(log_std, -1.5, atol=1e-6)  # the same for every state
    np.testing.assert_allclose(np.asarray(dist.greedy(inputs)), 2.0 * np.tanh(mean), rtol=1e-6)
    on_bound = np.array([[2.0, -2.0], [2.0, 2.0]], np.float32)
    unit = on_bound / 2.0
    expected = np.sum(-0.5 * ((unit - np.tanh(mean)) / np.exp(-1.5)) ** 2 + 1.5
                      - 0.5 * np.log(2 * np.pi), axis=-1)
    np.testing.assert_allclose(np.asarray(dist.logp(inputs, on_bound)), expected, rtol=1e-5)
    samples = np.asarray(dist.sample(inputs, jax.random.PRNGKey(1)))
    assert samples.shape == (2, 2) and np.all(np.abs(samples) <= 2.0)


def test_tanh_mean_actor_learns_its_std_and_is_feed_forward_only():
    box = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    config = IQLConfig().training(actor_tanh_mean=True).rl_module(model_config=SMALL)
    spec = spec_of(config, OBS, box)
    rng = np.random.default_rng(0)
    batch = {"obs": rng.uniform(-1, 1, (N, 2)).astype(np.float32),
             "actions": np.clip(rng.normal(0.0, 0.05, (N, 1)), -1, 1).astype(np.float32),
             "rewards": np.ones(N, np.float32),
             "new_obs": rng.uniform(-1, 1, (N, 2)).astype(np.float32),
             "terminateds": np.zeros(N, bool), "loss_mask": np.ones(N, np.float32)}
    (start, _), (later, _) = run_updates(spec, batch, 0, 30)
    # Actions spread 0.05 around 0 (where the mean starts): the likelihood pulls the std
    # down from e^-1.5.
    assert float(later.params["policy"]["log_std"][0]) < float(
        start.params["policy"]["log_std"][0])
    with pytest.raises(ConfigError, match="feed-forward only"):
        spec_of(config.rl_module(model_config={"use_lstm": True}), OBS, box)
