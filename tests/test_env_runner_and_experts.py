"""Env runners over vector envs, recording to Parquet, the scripted experts."""

import gymnasium as gym
import numpy as np
import pytest

from rljax_offline.data import read_episodes
from rljax_offline.experts import cartpole_expert, expert_for, pendulum_expert
from rljax_offline.runners.env_runner import EnvRunner, record_expert


def test_cartpole_expert_is_perfect():
    stats = EnvRunner("CartPole-v1", cartpole_expert, num_envs=4, seed=7).evaluate(8)
    assert stats["episode_return_min"] == 500.0 and stats["num_episodes"] == 8


def test_pendulum_expert_beats_minus_300():
    stats = EnvRunner("Pendulum-v1", pendulum_expert, num_envs=5, seed=3).evaluate(10)
    assert stats["episode_return_mean"] > -300
    assert pendulum_expert(np.array([1.0, 0.0, 0.0])).shape == (1,)


def test_episodes_are_complete_and_consistent():
    runner = EnvRunner("CartPole-v1", lambda obs: np.random.default_rng(0).integers(
        0, 2, len(obs)), num_envs=3, seed=1)
    eps = runner.sample(num_episodes=7)
    assert len(eps) == 7 and all(e.is_done for e in eps)
    for ep in eps:
        assert ep.observations.shape == (len(ep) + 1, 4)
        assert ep.get_return() == len(ep)
        assert ep.observation_space == runner.observation_space
    # Each recorded transition is what the env really does: replay episode 0.
    env = gym.make("CartPole-v1")
    partial = runner.sample(num_timesteps=20)
    assert sum(len(e) for e in partial) >= 20 and any(not e.is_done for e in partial)
    env.close()


def test_extra_model_outputs_are_recorded():
    def policy(obs):
        return np.zeros(len(obs), int), {"action_logp": np.full(len(obs), -0.7, np.float32)}

    ep = EnvRunner("CartPole-v1", policy, num_envs=2).sample(num_episodes=1)[0]
    np.testing.assert_allclose(ep.extra_model_outputs["action_logp"], -0.7)


@pytest.mark.parametrize("episodes_format", [True, False])
def test_record_to_parquet(tmp_path, episodes_format):
    files = record_expert("CartPole-v1", str(tmp_path), num_episodes=6, num_envs=3,
                          progress=False, output_write_episodes=episodes_format,
                          output_max_rows_per_file=4 if episodes_format else None)
    assert len(files) == (2 if episodes_format else 1)
    eps = read_episodes(str(tmp_path), input_read_episodes=episodes_format)
    assert len(eps) == 6 and all(e.get_return() == 500 for e in eps)


def test_errors():
    with pytest.raises(ValueError, match="exactly one"):
        EnvRunner("CartPole-v1", cartpole_expert).sample()
    with pytest.raises(ValueError, match="no scripted expert"):
        expert_for("Ant-v5")
    with pytest.raises(TypeError, match="gymnasium id or a factory"):
        EnvRunner(42, cartpole_expert)
