"""EnvRunner over vector envs: complete, replayable episodes across autoresets, timestep
budgets, extra model outputs, connector pipelines around a plain module, evaluate, record."""

import gymnasium as gym
import jax.numpy as jnp
import numpy as np
import pytest

from rljax_offline import BCConfig
from rljax_offline.acting.env_runner import EnvRunner, record_expert
from rljax_offline.acting.experts import cartpole_expert
from rljax_offline.connectors import Spaces, default_env_to_module, default_module_to_env
from rljax_offline.data import read_episodes


def random_policy(obs):
    return np.random.default_rng(len(obs)).integers(0, 2, len(obs))


def test_episodes_replay_exactly_in_a_fresh_env():
    runner = EnvRunner("CartPole-v1", random_policy, num_envs=3, seed=11)
    eps = runner.sample(num_episodes=9)  # more than num_envs: crosses autoresets
    assert len(eps) == 9 and all(e.is_done for e in eps)
    assert len({e.id_ for e in eps}) == 9
    for ep in eps:
        assert ep.observations.shape == (len(ep) + 1, 4)
        assert ep.get_return() == len(ep) and ep.terminated != ep.truncated
        assert ep.observation_space == runner.observation_space
    # Every recorded transition is what CartPole does from the recorded observation (the env
    # keeps float64 state, observations are float32: one step at a time).
    env = gym.make("CartPole-v1").unwrapped
    env.reset()
    for ep in eps:
        for t, a in enumerate(ep.actions):
            env.state = np.asarray(ep.observations[t], np.float64)
            env.steps_beyond_terminated = None
            obs, rew, term, _, _ = env.step(int(a))
            np.testing.assert_allclose(obs, ep.observations[t + 1], atol=1e-5)
            assert rew == ep.rewards[t]
        assert term == ep.terminated
    # The first episode of each sub-env starts from the seeded reset.
    first, _ = gym.make("CartPole-v1").reset(seed=11)
    assert any(np.array_equal(first, ep.observations[0]) for ep in eps)


def test_timestep_budget_returns_unfinished_chunks():
    runner = EnvRunner("CartPole-v1", cartpole_expert, num_envs=2, seed=1)
    eps = runner.sample(num_timesteps=30)
    assert 30 <= sum(len(e) for e in eps) < 32
    assert len(eps) == 2 and not any(e.is_done for e in eps)
    with pytest.raises(ValueError, match="exactly one"):
        runner.sample()


def test_extra_model_outputs_are_recorded():
    def policy(obs):
        return np.zeros(len(obs), int), {"action_logp": np.full(len(obs), -0.7, np.float32)}

    ep = EnvRunner("CartPole-v1", policy, num_envs=2).sample(num_episodes=1)[0]
    assert ep.extra_model_outputs["action_logp"].shape == (len(ep),)
    np.testing.assert_allclose(ep.extra_model_outputs["action_logp"], -0.7)


def test_evaluate_reports_rllib_metrics():
    stats = EnvRunner("CartPole-v1", cartpole_expert, num_envs=2, seed=0).evaluate(3)
    assert stats["episode_return_mean"] == stats["episode_return_min"] == 500.0
    assert stats["episode_return_max"] == 500.0 and stats["episode_len_mean"] == 500.0
    assert stats["num_episodes"] == 3


def test_connector_pipelines_around_a_plain_module():
    spaces = Spaces.of(gym.spaces.Box(-5, 5, (4,)), gym.spaces.Discrete(2))

    def logits(obs):  # the expert's decision as categorical logits
        push = jnp.asarray(obs) @ jnp.array([0.0, 0.5, 1.0, 0.5]) > 0
        return jnp.stack([jnp.where(push, -9.0, 9.0), jnp.where(push, 9.0, -9.0)], -1)

    runner = EnvRunner("CartPole-v1", logits, num_envs=2, seed=0,
                       env_to_module=default_env_to_module(spaces),
                       module_to_env=default_module_to_env(spaces))
    stats = runner.evaluate(2)
    assert stats["episode_return_min"] == 500.0
    ep = runner.sample(num_timesteps=4)[0]
    assert np.all(ep.extra_model_outputs["action_logp"] > -1e-3)

    pend = Spaces.of(gym.spaces.Box(-8, 8, (3,)), gym.spaces.Box(-2, 2, (1,)))
    big = EnvRunner("Pendulum-v1", lambda obs: jnp.tile(jnp.array([[10.0, -5.0]]),
                                                        (len(obs), 1)),
                    num_envs=2, module_to_env=default_module_to_env(pend))
    ep = big.sample(num_timesteps=6)[0]
    np.testing.assert_array_equal(ep.actions, 2.0)  # mean 10 clipped into [-2, 2]


@pytest.mark.parametrize("episodes_format", [True, False])
def test_record_to_parquet(tmp_path, episodes_format):
    files = record_expert("CartPole-v1", str(tmp_path), num_episodes=6, num_envs=3,
                          progress=False, output_write_episodes=episodes_format,
                          output_max_rows_per_file=4 if episodes_format else None)
    assert len(files) == (2 if episodes_format else 1)
    eps = read_episodes(str(tmp_path), input_read_episodes=episodes_format)
    assert len(eps) == 6 and all(e.get_return() == 500 for e in eps)


def test_record_a_timestep_budget(tmp_path):
    runner = EnvRunner("CartPole-v1", random_policy, num_envs=2, seed=5)
    files = runner.record(str(tmp_path), num_timesteps=100)
    eps = read_episodes(files)
    assert 100 <= sum(len(e) for e in eps) < 102


def test_bad_env():
    with pytest.raises(TypeError, match="gymnasium id or a factory"):
        EnvRunner(42, cartpole_expert)
    with pytest.raises(ValueError, match="num_envs"):
        EnvRunner("CartPole-v1", cartpole_expert, num_envs=0)


def test_evaluations_of_neighbouring_seeds_reset_from_disjoint_seeds(tmp_path, monkeypatch):
    """Runs seeded 0, 1 and 2 evaluate on start states of their own: a vector env seeds its
    envs `s, s + 1, ...`, so seeds like `seed + 1_000 * iteration` made neighbouring runs share
    most of them (and one draw's bias: on Pendulum, -1,288 instead of -1,214 for a
    zero-torque policy over three such runs' last evaluations)."""
    record_expert("CartPole-v1", str(tmp_path), num_episodes=2, progress=False)
    resets = []
    real_reset = gym.vector.SyncVectorEnv.reset

    def counting_reset(self, *, seed=None, options=None):
        if seed is not None:
            resets.append((seed, self.num_envs))
        return real_reset(self, seed=seed, options=options)

    monkeypatch.setattr(gym.vector.SyncVectorEnv, "reset", counting_reset)
    env_seeds = {}
    for seed in (0, 1, 2):
        algo = (BCConfig().environment("CartPole-v1").offline_data(input_=str(tmp_path))
                .training(num_updates_per_iteration=1, train_batch_size_per_learner=8)
                .rl_module(model_config={"fcnet_hiddens": [4]})
                .evaluation(evaluation_interval=1, evaluation_duration=4,
                            evaluation_num_envs=4)
                .debugging(seed=seed)).build()
        resets.clear()
        for _ in range(3):
            algo.train()
        algo.stop()
        env_seeds[seed] = {s + i for s, n in resets for i in range(n)}
        assert len(env_seeds[seed]) == 12  # 3 evaluations x 4 envs, none repeated
    assert not (env_seeds[0] & env_seeds[1]) and not (env_seeds[1] & env_seeds[2])
