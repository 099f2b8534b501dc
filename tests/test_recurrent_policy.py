"""Recurrent policies (LSTM, GRU) with RLlib's model-config keys: shapes and state layout,
sequences vs. step-by-step acting. Training them (every algorithm, and BC on StatelessCartPole
where memory matters) is in test_recurrent_algorithms.py."""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from bc_testlib import learner_batch

from rljax_offline.connectors import (
    Spaces,
    default_learner,
)
from rljax_offline.models.policy import MODEL_CONFIG_DEFAULTS, make_policy

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


def test_learner_batch_lines_up_with_a_recurrent_policys_outputs_and_loss_mask():
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
