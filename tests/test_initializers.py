"""RLlib's layer-initializer keys of `model_config`: torch's `nn.init` names drawn as torch
draws them, PyTorch's `nn.Linear` default ("torch_default"), flax initializers as they are,
ours untouched when none is given, and bad values as named errors."""

import math

import flax.linen as nn
import gymnasium as gym
import jax
import numpy as np
import pytest

from rljax_offline import Algorithm, BCConfig
from rljax_offline.acting.env_runner import record_expert
from rljax_offline.algorithms.config import ConfigError
from rljax_offline.algorithms.td3_bc import TD3BCConfig
from rljax_offline.models.initializers import TORCH_DEFAULT
from rljax_offline.models.networks import continuous_q_network, mlp_network
from rljax_offline.models.policy import make_policy

OBS = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
ACT = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
WIDE = {"fcnet_hiddens": [512, 512]}  # many draws: tight statistics


def layers(params):
    return params["params"]


def test_torch_default_draws_kernel_and_bias_uniform_in_one_over_root_fan_in():
    net = mlp_network(OBS, 3, {**WIDE, "fcnet_kernel_initializer": "torch_default",
                               "fcnet_bias_initializer": "torch_default",
                               "head_fcnet_kernel_initializer": "torch_default",
                               "head_fcnet_bias_initializer": "torch_default"})
    p = layers(net.init(jax.random.PRNGKey(0)))
    for name, fan_in in (("Dense_0", 5), ("Dense_1", 512), ("Dense_2", 512)):
        bound = 1 / math.sqrt(fan_in)
        for leaf in ("kernel", "bias"):
            x = np.asarray(p[name][leaf])
            assert np.all(np.abs(x) <= bound), (name, leaf)
            if x.size >= 512:  # uniform: std bound/sqrt(3), within sampling error
                assert abs(x.std() - bound / math.sqrt(3)) < 0.1 * bound, (name, leaf)


def test_torch_names_draw_with_torchs_scales():
    spec = {**WIDE, "fcnet_kernel_initializer": "kaiming_uniform_",
            "fcnet_kernel_initializer_kwargs": {"a": math.sqrt(5)},
            "fcnet_bias_initializer": "constant_", "fcnet_bias_initializer_kwargs": {"val": 0.1},
            "head_fcnet_kernel_initializer": "xavier_uniform",
            "head_fcnet_bias_initializer": "zeros_"}
    p = layers(mlp_network(OBS, 3, spec).init(jax.random.PRNGKey(1)))
    hidden = np.asarray(p["Dense_1"]["kernel"])  # kaiming, a=sqrt(5): nn.Linear's own bound
    assert np.abs(hidden).max() <= 1 / math.sqrt(512) and hidden.std() > 0.5 / math.sqrt(3 * 512)
    np.testing.assert_array_equal(p["Dense_0"]["bias"], np.float32(0.1))
    head = np.asarray(p["Dense_2"]["kernel"])  # xavier: sqrt(6 / (fan_in + fan_out))
    assert np.abs(head).max() <= math.sqrt(6 / (512 + 3))
    assert head.std() > 0.8 * math.sqrt(6 / (512 + 3)) / math.sqrt(3)
    np.testing.assert_array_equal(p["Dense_2"]["bias"], 0.0)
    ortho = mlp_network(OBS, 3, {**WIDE, "fcnet_kernel_initializer": "orthogonal_",
                                 "fcnet_kernel_initializer_kwargs": {"gain": 2.0}})
    w = np.asarray(layers(ortho.init(jax.random.PRNGKey(2)))["Dense_1"]["kernel"])
    # orthogonal up to float32 rounding of a 512-dim QR (n * eps per entry, times gain^2)
    np.testing.assert_allclose(w.T @ w, 4.0 * np.eye(512),
                               atol=4.0 * 512 * 4 * np.finfo(np.float32).eps)


def test_no_initializer_keeps_ours_and_a_flax_initializer_is_used_as_given():
    ours = mlp_network(OBS, 3, WIDE).init(jax.random.PRNGKey(3))
    explicit = mlp_network(OBS, 3, {**WIDE,
                                    "fcnet_kernel_initializer": nn.initializers.lecun_normal(),
                                    "fcnet_bias_initializer": nn.initializers.zeros_init()},
                           ).init(jax.random.PRNGKey(3))
    jax.tree_util.tree_map(np.testing.assert_array_equal, ours, explicit)
    p = layers(ours)
    np.testing.assert_array_equal(p["Dense_1"]["bias"], 0.0)
    # the policy head keeps its 0.01-scaled draw: near-uniform initial actions
    policy = make_policy(OBS, ACT).init(jax.random.PRNGKey(3))
    head = np.asarray(layers(policy)["Dense_2"]["kernel"])
    assert head.std() < 0.2 / math.sqrt(256)  # sqrt(0.01 / fan_in), not LeCun 1/sqrt(fan_in)


def test_td3_bc_starts_from_pytorchs_draw_and_goes_back_to_flaxs():
    """TD3+BC's default model config is `TORCH_DEFAULT`'s draw; the keys at None give
    flax's back (the d3rlpy parity page's flax-draw comparison runs it)."""
    config = TD3BCConfig()
    p = layers(continuous_q_network(OBS, ACT, config.model_config).init(jax.random.PRNGKey(4)))
    bias = np.asarray(p["Dense_0"]["bias"])
    assert np.all(np.abs(bias) <= 1 / math.sqrt(5 + 2)) and bias.std() > 0.1
    flax_again = config.rl_module(model_config={k: None for k in TORCH_DEFAULT})
    q = continuous_q_network(OBS, ACT, flax_again.model_config)
    np.testing.assert_array_equal(layers(q.init(jax.random.PRNGKey(4)))["Dense_0"]["bias"], 0.0)


@pytest.mark.parametrize("model_config, message", [
    ({"fcnet_kernel_initializer": "xavier"}, "fcnet_kernel_initializer: unknown initializer"),
    ({"fcnet_bias_initializer": "orthogonal_"}, "fcnet_bias_initializer: 'orthogonal' needs a"),
    ({"fcnet_kernel_initializer": "normal_", "fcnet_kernel_initializer_kwargs": {"sd": 1}},
     r"fcnet_kernel_initializer_kwargs has keys \['sd'\]"),
    ({"head_fcnet_bias_initializer": None, "head_fcnet_bias_initializer_kwargs": {"val": 1}},
     "given without"),
    ({"fcnet_kernel_initializer": 3}, "must be a name, a flax initializer or None"),
])
def test_bad_initializers_are_named_config_errors(model_config, message):
    with pytest.raises(ConfigError, match=message):
        TD3BCConfig().rl_module(model_config=model_config).validate()


@pytest.mark.parametrize("kind", ["lstm", "cnn"])
def test_recurrent_and_image_policies_take_the_head_initializers(kind):
    obs = (gym.spaces.Box(0, 255, (16, 16, 3), np.uint8) if kind == "cnn" else OBS)
    extra = ({"conv_filters": [[4, 4, 2], [8, 8, 1]]} if kind == "cnn"
             else {"use_lstm": True, "lstm_cell_size": 16})
    for init, zero in (("torch_default", False), (None, True)):
        policy = make_policy(obs, ACT, fcnet_hiddens=[16], head_fcnet_bias_initializer=init,
                             **extra)
        flat = jax.tree_util.tree_flatten_with_path(policy.init(jax.random.PRNGKey(5)))[0]
        head_bias = next(v for path, v in flat if v.shape == (4,))  # the 2 means, 2 log-stds
        assert head_bias.shape == (4,) and bool(np.all(head_bias == 0)) == zero, (kind, init)


def test_a_checkpoint_of_a_run_with_an_initializer_function_asks_for_the_config(tmp_path):
    record_expert("CartPole-v1", str(tmp_path / "data"), num_episodes=2, progress=False)
    config = (BCConfig().environment("CartPole-v1").offline_data(input_=str(tmp_path / "data"))
              .training(num_updates_per_iteration=2, train_batch_size_per_learner=8)
              .rl_module(model_config={"fcnet_hiddens": [8],
                                       "fcnet_kernel_initializer": nn.initializers.ones})
              .evaluation(evaluation_interval=0))
    algo = config.build()
    algo.train()
    algo.save(str(tmp_path / "ckpt"))
    with pytest.raises(ValueError, match=r"code in its config \['model_config.fcnet_kernel_"):
        Algorithm.from_checkpoint(str(tmp_path / "ckpt"))
    again = Algorithm.from_checkpoint(str(tmp_path / "ckpt"), config)
    jax.tree_util.tree_map(np.testing.assert_array_equal, again.state.params, algo.state.params)
