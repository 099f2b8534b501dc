"""TD3+BC: d3rlpy's names and defaults, Box actions only, the BC weighting
`lambda = alpha / mean|Q|` held constant in the gradient, the delayed actor and target updates,
clipped target smoothing noise, the data's actions clipped to the bounds, the paper's
observation normalization shared by learning, acting and export, exact resume, and a short
learning run on expert Pendulum data.

(8 devices == 1, the three update modes and the masked rows: the cross-cutting algorithm
tests.)"""

import types

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from learner_testlib import max_diff
from offline_rl_testlib import assert_resume_is_exact, run_updates, spec_of

from rljax_offline import spaces as sp
from rljax_offline.acting.env_runner import record_expert
from rljax_offline.algorithms.config import ConfigError
from rljax_offline.algorithms.td3_bc import TD3BCConfig
from rljax_offline.data import read_episodes
from rljax_offline.export import load_stablehlo
from rljax_offline.learning.init import init_state
from rljax_offline.learning.update import BatchAxis
from rljax_offline.models.actor_and_q import q_ensemble
from rljax_offline.models.initializers import TORCH_DEFAULT
from rljax_offline.models.networks import mlp_network

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
ACT = gym.spaces.Box(-2, 2, (1,), np.float32)
SMALL = {"fcnet_hiddens": [32, 32]}
N = 64


def small(**training):
    return TD3BCConfig().training(**training).rl_module(model_config=SMALL)


def random_batch(n=N, seed=0):
    rng = np.random.default_rng(seed)
    return {"obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            "new_obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            "actions": rng.uniform(-2, 2, (n, 1)).astype(np.float32),
            "rewards": rng.normal(size=n).astype(np.float32),
            "terminateds": rng.random(n) < 0.1}


def networks(config):
    """The actor and twin Q networks as TD3BCConfig builds them (same params layout)."""
    obs, act = sp.to_spec(OBS), sp.to_spec(ACT)
    return (mlp_network(obs, 1, config.model_config),
            q_ensemble(obs, act, config.model_config, True))


def loss_named(spec, name):
    return next(loss for loss in spec.learning.losses if loss.name == name)


def test_d3rlpy_defaults():
    c = TD3BCConfig()
    assert (c.alpha, c.target_smoothing_sigma, c.target_smoothing_clip,
            c.update_actor_interval) == (2.5, 0.2, 0.5, 2)
    assert (c.tau, c.gamma, c.actor_lr, c.critic_lr, c.train_batch_size_per_learner) == (
        0.005, 0.99, 3e-4, 3e-4, 256)
    assert (c.twin_q, c.normalize_observations, c.lr, c.algo_name) == (True, True, None,
                                                                       "td3_bc")
    assert c.model_config == {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu",
                              **TORCH_DEFAULT}  # PyTorch's draw, as the paper's code


def test_discrete_actions_are_a_one_line_named_error():
    config = TD3BCConfig().environment("CartPole-v1").offline_data(input_="unused")
    with pytest.raises(ConfigError, match="TD3BCConfig needs Box actions") as e:
        config.build()
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("change, message", [
    (lambda c: c.training(lr=1e-3), "lr is not used"),
    (lambda c: c.training(update_actor_interval=0), "update_actor_interval must be"),
    (lambda c: c.training(tau=0.0), "tau must be"),
    (lambda c: c.rl_module(model_config={"use_lstm": True}), "no recurrent form"),
    (lambda c: c.env_runners(env_to_module_connector=lambda s: []), "normalize_observations"),
])
def test_bad_values_are_one_line_named_errors(change, message):
    with pytest.raises(ConfigError, match=message) as e:
        change(TD3BCConfig()).validate()
    assert "\n" not in str(e.value)


def test_lambda_is_alpha_over_the_mean_abs_q_held_constant():
    config = small(alpha=2.5)
    spec = spec_of(config, OBS, ACT)
    policy, q = networks(config)
    params = jax.device_get(init_state(spec.learning, 0).params)
    batch = random_batch()
    mask = (np.arange(N) % 4 != 0).astype(np.float32)  # masked rows must not count in lambda
    batch["loss_mask"] = mask
    batch["obs"][mask == 0] = 50.0
    keys = jax.random.split(jax.random.PRNGKey(0), N)
    actor = loss_named(spec, "actor")

    def parts(policy_params):
        unit = jnp.tanh(policy.apply(policy_params, batch["obs"]))
        q1 = q.apply(params["q"], batch["obs"], 2.0 * unit)[0]
        bc = jnp.mean((unit - batch["actions"] / 2.0) ** 2, axis=-1)
        return q1, bc

    q1, bc = parts(params["policy"])
    lam = 2.5 / (np.sum(np.abs(q1) * mask) / mask.sum())
    per_example, metrics = actor.fn(params, batch, keys, BatchAxis())
    np.testing.assert_allclose(metrics["q_lambda"], lam, rtol=1e-5)
    np.testing.assert_allclose(per_example, -lam * q1 + bc, rtol=1e-5, atol=1e-6)

    def masked_mean(x):
        return jnp.sum(x * mask) / mask.sum()

    def ours(pp):
        return masked_mean(actor.fn({**params, "policy": pp}, batch, keys, BatchAxis())[0])

    def constant_lambda(pp):
        q1, bc = parts(pp)
        return masked_mean(-lam * q1 + bc)

    def live_lambda(pp):  # what a lambda not held constant would give
        q1, bc = parts(pp)
        return masked_mean(-2.5 / masked_mean(jnp.abs(q1)) * q1 + bc)

    grads = jax.grad(ours)(params["policy"])
    assert max_diff(grads, jax.grad(constant_lambda)(params["policy"])) < 1e-5
    assert max_diff(grads, jax.grad(live_lambda)(params["policy"])) > 1e-3


def test_actor_and_targets_step_only_on_every_second_update():
    config = small()
    spec = spec_of(config, OBS, ACT)
    (s0, _), (s1, _), (s2, _), (s3, _) = run_updates(spec, random_batch(), 0, 1, 2, 3)
    p0, p1, p2, p3 = s0.params, s1.params, s2.params, s3.params
    for before, after in ((p0, p1), (p1, p2), (p2, p3)):
        assert max_diff(before["q"], after["q"]) > 0  # the critic steps every update
    # Off-steps (1, 3): the actor's params, its optimizer state and the targets as they were.
    for (a, b, sa, sb) in ((p0, p1, s0, s1), (p2, p3, s2, s3)):
        assert max_diff(a["policy"], b["policy"]) == 0.0
        assert max_diff(sa.opt_states["actor"], sb.opt_states["actor"]) == 0.0
        assert max_diff(a["target_policy"], b["target_policy"]) == 0.0
        assert max_diff(a["target_q"], b["target_q"]) == 0.0
    # Update 2: the actor steps (Adam counts one step) and both targets follow by tau.
    assert max_diff(p1["policy"], p2["policy"]) > 0
    assert int(s2.opt_states["actor"][0].count) == 1
    assert int(s2.opt_states["critic"][0].count) == 2
    for target, online in (("target_policy", "policy"), ("target_q", "q")):
        expected = jax.tree_util.tree_map(lambda o, t: 0.005 * o + 0.995 * t, p2[online],
                                          p1[target])
        assert max_diff(p2[target], expected) < 1e-7


def test_target_smoothing_noise_is_clipped():
    """With noise of std 100, the target action stays within `target_smoothing_clip` of the
    target actor's (in units of the half-range): the TD target lies within the range of
    `0.99 * min_k Q_target` over that interval; with a clip of 0 it is the noiseless one."""
    batch = {**random_batch(), "rewards": np.zeros(N, np.float32),
             "terminateds": np.zeros(N, bool)}
    keys = jax.random.split(jax.random.PRNGKey(1), N)

    def targets(clip):
        config = small(target_smoothing_sigma=100.0, target_smoothing_clip=clip)
        spec = spec_of(config, OBS, ACT)
        params = jax.device_get(init_state(spec.learning, 0).params)
        _, metrics = loss_named(spec, "critic").fn(params, batch, keys, BatchAxis())
        return np.asarray(metrics["td_target_mean"]), params, config

    def next_q(params, config, unit):
        policy, q = networks(config)
        return 0.99 * np.min(q.apply(params["target_q"], batch["new_obs"], 2.0 * unit), axis=0)

    y0, params, config = targets(0.0)
    u = np.tanh(np.asarray(networks(config)[0].apply(params["target_policy"], batch["new_obs"])))
    np.testing.assert_allclose(y0, next_q(params, config, u), rtol=1e-5, atol=1e-6)
    y, _, _ = targets(0.1)
    grid = [next_q(params, config, np.clip(u + d, -1, 1)) for d in np.linspace(-0.1, 0.1, 201)]
    low, high = np.min(grid, axis=0), np.max(grid, axis=0)
    assert np.all((y >= low - 1e-4) & (y <= high + 1e-4))
    assert np.mean(np.abs(y - y0) > 1e-6) > 0.9  # the noise is there, at its clip
    wide, _, _ = targets(1.0)
    assert np.mean((wide < low - 1e-4) | (wide > high + 1e-4)) > 0.3  # a wider clip leaves it


def test_data_actions_outside_the_bounds_are_clipped_in_the_learner_pipeline():
    spec = spec_of(small(), OBS, ACT)
    (piece,) = spec.data.learner_connector
    actions = np.array([[-3.0], [0.5], [7.0], [2.0]], np.float32)
    episodes = types.SimpleNamespace(action_space_spec=sp.to_spec(ACT))
    _, out, _ = piece.apply((), episodes, {"actions": actions}, None)
    np.testing.assert_array_equal(out["actions"], [[-2.0], [0.5], [2.0], [2.0]])


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("pendulum"))
    record_expert("Pendulum-v1", path, num_episodes=6, progress=False)
    return path


def pendulum_config(data, num_devices=1, updates=5):
    return (small(num_updates_per_iteration=updates).environment("Pendulum-v1")
            .offline_data(input_=data).learners(num_devices=num_devices)
            .evaluation(evaluation_interval=0))


def test_actor_steps_on_every_second_update_on_eight_devices(pendulum):
    algo = pendulum_config(pendulum, num_devices=8, updates=4).build()
    result = algo.train()
    assert result["num_devices"] == 8 and int(algo.state.step) == 4
    assert int(algo.state.opt_states["actor"][0].count) == 2
    assert int(algo.state.opt_states["critic"][0].count) == 4
    algo.stop()


def test_observations_are_normalized_by_the_data_sets_mean_and_std_also_at_acting(
        pendulum, tmp_path):
    algo = pendulum_config(pendulum).build()
    algo.train()
    observations = np.concatenate([np.asarray(ep.get_observations())
                                   for ep in read_episodes(pendulum)])
    stats = jax.device_get(algo.state.connector_state)[0][0]
    np.testing.assert_allclose(stats.mean, observations.mean(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(stats.std, observations.std(0, ddof=1), rtol=1e-4)
    x = np.stack([algo._obs_space.sample() for _ in range(100)]).astype(np.float32)
    policy, _ = networks(algo.config)
    params = jax.device_get(algo.state.params)
    expected = 2.0 * np.tanh(policy.apply(params["policy"],
                                          (x - stats.mean) / (stats.std + 1e-6)))
    np.testing.assert_allclose(algo.compute_actions(x), expected, rtol=1e-5, atol=1e-5)
    exported = load_stablehlo(algo.export_policy(str(tmp_path / "policy.stablehlo")))
    np.testing.assert_allclose(exported(x)[0], expected, rtol=1e-5, atol=1e-5)
    algo.stop()


def test_resume_is_exact(pendulum, tmp_path):
    assert_resume_is_exact(pendulum_config(pendulum), tmp_path)


@pytest.mark.slow
def test_learns_pendulum_from_expert_data(tmp_path):
    """On expert Pendulum episodes (the expert scores about -150; random torques about -1200
    to -1500) the level (the mean of the last two evaluations, never the best one) clears
    -600 after 5,000 updates, far above the untrained actor (PyTorch's draw, the default, gets
    there later than flax's: levels -408 and -180 for seeds 0 and 1 here, flax's -174 and
    -181). The mixed-quality comparison with
    d3rlpy's TD3PlusBC at 20k updates is `benchmarks/d3rlpy_compare.py --only td3bc-pendulum`
    (too long for the suite)."""
    record_expert("Pendulum-v1", str(tmp_path / "data"), num_episodes=20, progress=False)
    algo = (TD3BCConfig().environment("Pendulum-v1").offline_data(input_=str(tmp_path / "data"))
            .training(num_updates_per_iteration=1000)
            .rl_module(model_config={"fcnet_hiddens": [64, 64]}).learners(num_devices=1)
            .evaluation(evaluation_interval=0, evaluation_duration=10,
                        evaluation_num_envs=10)).build()
    first = algo.evaluate(10)["episode_return_mean"]
    returns = []
    for _ in range(5):
        algo.train()
        returns.append(algo.evaluate(10)["episode_return_mean"])
    algo.stop()
    level = float(np.mean(returns[-2:]))
    print(f"TD3+BC on expert Pendulum: untrained {first:.0f}, after each 1,000 updates "
          f"{np.round(returns)}, level {level:.0f}")
    assert level >= -600 and level > first + 300, (first, returns)
