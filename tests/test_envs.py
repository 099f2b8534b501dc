"""Env wrappers: StatelessCartPole masks the velocities; the Atari preprocessing stack on a
fake ALE-like game (no ROMs needed) skips, max-pools, resets with no-ops and FIRE, ends
episodes on lost lives and warps frames to uint8 84x84x1."""

import gymnasium as gym
import jax
import numpy as np
import pytest

from rljax_offline.envs import (
    EpisodicLife,
    FireReset,
    MaxAndSkip,
    NoopReset,
    StatelessCartPole,
    WarpFrame,
    wrap_atari,
)
from rljax_offline.envs.atari import area_weights


def test_stateless_cartpole_observes_position_and_angle_only():
    env = StatelessCartPole()
    obs, _ = env.reset(seed=0)
    assert env.observation_space.shape == (2,) and obs.shape == (2,)
    np.testing.assert_array_equal(obs, env.last_full_observation[[0, 2]])
    obs, *_ = env.step(1)
    assert env.observation_space.contains(obs)


class FakeAtari(gym.Env):
    """210x160 RGB frames whose pixel values encode the frame counter; 3 lives, one lost
    every 10 frames; reward 1 a frame; records the actions it got."""

    observation_space = gym.spaces.Box(0, 255, (210, 160, 3), np.uint8)
    action_space = gym.spaces.Discrete(4)

    def __init__(self):
        self.actions, self.resets = [], 0

    def get_action_meanings(self):
        return ["NOOP", "FIRE", "RIGHT", "LEFT"]

    def _frame(self):
        return np.full((210, 160, 3), self.t % 200, np.uint8)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.lives = 0, 3
        self.resets += 1
        return self._frame(), {"lives": self.lives}

    def step(self, action):
        self.actions.append(int(action))
        self.t += 1
        if self.t % 10 == 0:
            self.lives -= 1
        return self._frame(), 1.0, self.lives == 0, False, {"lives": self.lives}


def test_max_and_skip_sums_rewards_and_max_pools_the_last_two_frames():
    env = MaxAndSkip(FakeAtari(), skip=4)
    env.reset(seed=0)
    obs, reward, *_ = env.step(2)
    assert reward == 4.0 and env.unwrapped.actions == [2] * 4
    assert obs[0, 0, 0] == 4  # max of frames 3 and 4


def test_noop_reset_and_fire_reset():
    env = NoopReset(FakeAtari(), noop_max=5)
    env.reset(seed=0)
    n = len(env.unwrapped.actions)
    assert 1 <= n <= 5 and set(env.unwrapped.actions) == {0}
    fire = FireReset(FakeAtari())
    fire.reset(seed=0)
    assert fire.unwrapped.actions == [1]
    with pytest.raises(ValueError, match="FIRE"):
        FireReset(gym.make("CartPole-v1").unwrapped)


def test_episodic_life_ends_episodes_on_a_lost_life_and_continues_the_game():
    env = EpisodicLife(FakeAtari())
    env.reset(seed=0)
    steps = 0
    terminated = False
    while not terminated:
        _, _, terminated, _, info = env.step(0)
        steps += 1
    assert steps == 10 and info["lives"] == 2
    env.reset()
    assert env.unwrapped.resets == 1  # the game went on


def test_area_resize_is_the_block_mean_and_warp_frame_gives_uint8():
    w = area_weights(6, 3)
    np.testing.assert_allclose(w.sum(1), 1.0)
    np.testing.assert_allclose(w[0], [0.5, 0.5, 0, 0, 0, 0])
    env = WarpFrame(FakeAtari(), dim=84)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (84, 84, 1) and obs.dtype == np.uint8
    assert env.observation_space.contains(obs)


def test_wrap_atari_stack():
    env = wrap_atari(FakeAtari(), dim=84, frameskip=4, noop_max=3)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (84, 84, 1) and obs.dtype == np.uint8
    assert env.unwrapped.actions[-1] == 1  # FIRE after the no-ops
    obs, reward, *_ = env.step(3)
    assert reward == 4.0 and env.observation_space.contains(obs)


def test_stateless_cartpole_has_a_gymnasium_id_that_checkpoints_and_the_cli_can_keep():
    """An id, unlike a class, survives a checkpoint and the command line: our envs are
    registered with gymnasium, and `module:id` works before anything imported them."""
    from rljax_offline.envs import STATELESS_CARTPOLE_ID, make_env

    for env in (make_env(STATELESS_CARTPOLE_ID, {"max_episode_steps": 7}),
                gym.make(f"rljax_offline.envs:{STATELESS_CARTPOLE_ID}")):
        obs, _ = env.reset(seed=0)
        assert env.observation_space.shape == obs.shape == (2,)
        assert env.action_space == gym.spaces.Discrete(2)
    env = make_env(STATELESS_CARTPOLE_ID, {"max_episode_steps": 7})
    env.reset(seed=0)
    ends = [env.step(t % 2)[2:4] for t in range(7)]  # alternating pushes keep the pole up
    assert ends[-1] == (False, True) and not any(map(any, ends[:-1]))  # env_config reached it
    with pytest.raises(TypeError, match="gymnasium id or a factory"):
        make_env(3)


def test_recurrent_ppo_on_the_stateless_cartpole_id_restores_from_its_checkpoint(tmp_path):
    from rljax_offline import Algorithm, PPOConfig

    algo = (PPOConfig().environment("StatelessCartPole-v1")
            .env_runners(num_envs_per_env_runner=2)
            .training(train_batch_size_per_learner=64, minibatch_size=32, num_epochs=1)
            .rl_module(model_config={"use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 8,
                                     "fcnet_hiddens": [8]})
            .learners(num_devices=1)).build()
    algo.train()
    algo.save(str(tmp_path / "ckpt"))
    back = Algorithm.from_checkpoint(str(tmp_path / "ckpt"))
    for a, b in zip(jax.tree_util.tree_leaves(jax.device_get(algo.state.params)),
                    jax.tree_util.tree_leaves(jax.device_get(back.state.params))):
        np.testing.assert_array_equal(a, b)
    assert back.train()["training_iteration"] == 2
    algo.stop()
    back.stop()
