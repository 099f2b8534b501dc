"""Recurrent policies (LSTM, GRU) with RLlib's model-config keys: shapes and state layout,
sequences vs. step-by-step acting, and (slow) BC on StatelessCartPole where memory matters."""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from bc_testlib import learner_batch, train_bc

from rljax_offline.connectors import (
    Spaces,
    default_env_to_module,
    default_learner,
    default_module_to_env,
)
from rljax_offline.envs import StatelessCartPole
from rljax_offline.episode_builder import EpisodeBuilder
from rljax_offline.experts import cartpole_expert
from rljax_offline.models.policy import MODEL_CONFIG_DEFAULTS, make_policy
from rljax_offline.runners.actor import ActorPolicy
from rljax_offline.runners.env_runner import EnvRunner

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
ACT = gym.spaces.Discrete(2)


def test_model_config_keys_and_defaults_are_rllibs():
    for key, default in {"use_lstm": False, "lstm_cell_size": 256, "max_seq_len": 20,
                         "lstm_use_prev_action": False, "lstm_use_prev_reward": False}.items():
        assert MODEL_CONFIG_DEFAULTS[key] == default
    with pytest.raises(ValueError, match="unknown model_config keys"):
        make_policy(OBS, ACT, use_lsmt=True)
    with pytest.raises(ValueError, match="exclusive"):
        make_policy(OBS, ACT, use_lstm=True, use_gru=True)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_sequence_forward_equals_stepping_one_step_at_a_time(cell):
    """A sequence of T steps from `state_in` gives the outputs and final state that acting
    step by step (T = 1, the previous state_out as state_in) gives; `seq_lens` stops the
    state at each sequence's last real step."""
    policy = make_policy(OBS, ACT, (8,), **{f"use_{cell}": True}, lstm_cell_size=5,
                         max_seq_len=6)
    assert policy.is_stateful and policy.max_seq_len == 6
    keys = {"lstm": {"h", "c"}, "gru": {"h"}}[cell]
    assert set(policy.initial_state()) == keys and policy.initial_state()["h"].shape == (5,)
    params = policy.init(jax.random.PRNGKey(0))
    obs = jax.random.normal(jax.random.PRNGKey(1), (2, 6, 3))
    state0 = jax.tree_util.tree_map(lambda x: x + 0.1, policy.initial_state(2))
    seq_lens = jnp.array([6, 4])
    forward = jax.jit(policy.forward)
    out, state = forward(params, {"obs": obs, "state_in": state0, "seq_lens": seq_lens})
    assert out.shape == (2, 6, 2)
    s = state0
    for t in range(6):
        o, s_next = forward(params, {"obs": obs[:, t:t + 1], "state_in": s})
        np.testing.assert_allclose(out[:, t], o[:, 0], rtol=1e-5, atol=1e-5)
        if t == 3:
            np.testing.assert_allclose(state["h"][1], s_next["h"][1], rtol=1e-5, atol=1e-6)
        s = s_next
    np.testing.assert_allclose(state["h"][0], s["h"][0], rtol=1e-5, atol=1e-6)
    batch = {"obs": obs, "state_in": state0, "seq_lens": seq_lens}
    np.testing.assert_allclose(policy.dist_inputs(params, batch), out, rtol=1e-6)
    with pytest.raises(TypeError, match="needs a state"):
        policy.apply(params, obs[:, 0])


def test_learner_batch_trains_a_recurrent_policy_with_masked_losses():
    """The default learner pipeline with max_seq_len feeds `dist_inputs` directly: outputs
    `[B * K, max_seq_len, d]` line up with `actions` and `loss_mask`."""
    from connector_testlib import random_episodes

    eps = random_episodes(n=4, seed=3, lookback=False)
    obs_space = gym.spaces.Box(-10, 10, (3,), np.float32)
    act_space = gym.spaces.Discrete(3)
    spaces = Spaces.of(obs_space, act_space)
    policy = make_policy(obs_space, act_space, (8,), use_lstm=True, lstm_cell_size=4,
                         max_seq_len=4)
    pipe = default_learner(spaces, max_seq_len=4, initial_state=policy.initial_state())
    batch = learner_batch(pipe, spaces, eps)
    params = policy.init(jax.random.PRNGKey(0))
    out = policy.dist_inputs(params, batch)
    assert out.shape == (*batch["actions"].shape, 3)
    assert batch["loss_mask"].shape == batch["actions"].shape
    np.testing.assert_array_equal(np.asarray(batch["loss_mask"]).sum(1), batch["seq_lens"])


def _record_stateless_expert(num_episodes: int, seed: int):
    """Expert episodes on StatelessCartPole: the expert sees the full state, the episodes
    record only what the policy will see (x, theta)."""
    env = StatelessCartPole()
    episodes = []
    for i in range(num_episodes):
        obs, _ = env.reset(seed=seed + i)
        b = EpisodeBuilder(observation_space=env.observation_space,
                           action_space=env.action_space)
        b.add_env_reset(obs)
        done = False
        while not done:
            action = int(cartpole_expert(env.last_full_observation[None])[0])
            obs, reward, term, trunc, _ = env.step(action)
            b.add_env_step(obs, action, float(reward), terminated=term, truncated=trunc)
            done = term or trunc
        episodes.append(b.finalize())
    return episodes


def _mean_return(policy, params, spaces, env_to_module, episodes=4):
    acting = ActorPolicy(policy, params, spaces, env_to_module, None,
                         default_module_to_env(spaces))
    runner = EnvRunner(lambda cfg: StatelessCartPole(), acting, num_envs=episodes, seed=100)
    done = list(runner.episodes(num_episodes=episodes))
    if policy.is_stateful:  # state_out recorded per step, as RLlib's module-to-env does
        assert all(ep.get_extra_model_outputs("state_out")["h"].shape == (len(ep), 32)
                   for ep in done)
    return float(np.mean([ep.get_return() for ep in done]))


@pytest.mark.slow
def test_lstm_beats_mlp_on_stateless_cartpole_with_bc():
    """The velocities are masked: an MLP trained by BC on the expert's data cannot tell which
    way the pole moves; an LSTM can, and balances far longer."""
    episodes = _record_stateless_expert(10, seed=0)
    env = StatelessCartPole()
    spaces = Spaces.of(env.observation_space, env.action_space)
    S = 16
    lstm = make_policy(spaces.observation, spaces.action, (32,), use_lstm=True,
                       lstm_cell_size=32, max_seq_len=S)
    batch = learner_batch(default_learner(spaces, max_seq_len=S,
                                          initial_state=lstm.initial_state()), spaces, episodes)
    params, losses = train_bc(lstm, batch, steps=1000, minibatch=64)
    assert losses[-20:].mean() < 0.5 * losses[:5].mean()
    lstm_return = _mean_return(lstm, params, spaces, default_env_to_module(
        spaces, max_seq_len=S, initial_state=lstm.initial_state()))

    mlp = make_policy(spaces.observation, spaces.action, (32, 32))
    batch = learner_batch(default_learner(spaces), spaces, episodes)
    params, _ = train_bc(mlp, batch, steps=1000, minibatch=1024)
    mlp_return = _mean_return(mlp, params, spaces, default_env_to_module(spaces))
    print(f"StatelessCartPole BC mean return: LSTM {lstm_return:.1f}, MLP {mlp_return:.1f}")
    assert lstm_return > 100 and lstm_return > 3 * mlp_return, (lstm_return, mlp_return)
