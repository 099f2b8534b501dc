"""The shipped scripted experts: CartPole-v1 perfect, Pendulum-v1 better than -300; batched
and single observations."""

import numpy as np
import pytest

from rljax_offline.acting.env_runner import EnvRunner
from rljax_offline.acting.experts import cartpole_expert, expert_for, pendulum_expert


def test_cartpole_expert_is_perfect_on_every_seed():
    stats = EnvRunner("CartPole-v1", cartpole_expert, num_envs=10, seed=7).evaluate(30)
    assert stats["episode_return_min"] == 500.0 and stats["num_episodes"] == 30


def test_pendulum_expert_beats_minus_300():
    returns = []
    for seed in (0, 50):
        stats = EnvRunner("Pendulum-v1", pendulum_expert, num_envs=5, seed=seed).evaluate(10)
        returns.append(stats["episode_return_mean"])
    assert min(returns) > -300, returns


def test_batched_and_single_observations_agree():
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(64, 4))
    batched = cartpole_expert(obs)
    assert batched.dtype == np.int64 and set(batched) <= {0, 1}
    np.testing.assert_array_equal(batched, [cartpole_expert(o) for o in obs])
    th = rng.uniform(-np.pi, np.pi, 64)
    pobs = np.stack([np.cos(th), np.sin(th), rng.uniform(-8, 8, 64)], -1)
    acts = pendulum_expert(pobs)
    assert acts.shape == (64, 1) and acts.dtype == np.float32
    assert np.all(np.abs(acts) <= 2.0)
    np.testing.assert_array_equal(acts[:, 0], [pendulum_expert(o)[0] for o in pobs])
    assert pendulum_expert(np.array([1.0, 0.0, 0.0])).shape == (1,)
    # Upright and slightly right of it: push back left.
    assert pendulum_expert(np.array([np.cos(0.1), np.sin(0.1), 0.0]))[0] < 0


def test_expert_lookup():
    assert expert_for("CartPole-v1") is cartpole_expert
    with pytest.raises(ValueError, match="no scripted expert"):
        expert_for("Ant-v5")
