"""CNN policies: RLlib's default filters per image size, uint8 frames kept uint8 until the
device, and (slow) BC on a small synthetic image task."""

import flax.linen as nn
import gymnasium as gym
import jax
import numpy as np
import pytest
from bc_testlib import learner_batch, train_bc

from rljax_offline import Episode
from rljax_offline.connectors import Spaces, default_learner, frame_stack
from rljax_offline.models import cnn
from rljax_offline.models.cnn import WholeMapConv
from rljax_offline.models.policy import make_policy

ACT = gym.spaces.Discrete(3)


@pytest.mark.parametrize("shape, features", [((84, 84, 4), 256), ((64, 64, 3), 3 * 3 * 256),
                                             ((42, 42, 1), 256), ((10, 10, 1), 32)])
def test_default_filters_follow_rllib_per_image_size(shape, features):
    assert cnn.default_conv_filters(shape)[0][0] in (16, 32)
    enc = cnn.CNNEncoder(cnn.default_conv_filters(shape))
    x = jax.ShapeDtypeStruct((2, *shape), np.uint8)  # shapes only: no conv runs on CPU
    params = jax.eval_shape(enc.init, jax.random.PRNGKey(0), x)
    assert jax.eval_shape(enc.apply, params, x).shape == (2, features)


def test_conv_filter_errors_name_what_is_expected():
    with pytest.raises(ValueError, match="no default conv_filters"):
        make_policy(gym.spaces.Box(0, 255, (33, 33, 3), np.uint8), ACT)
    with pytest.raises(ValueError, match=r"conv_filters\[1\]"):
        make_policy(gym.spaces.Box(0, 255, (33, 33, 3), np.uint8), ACT,
                    conv_filters=[[8, [3, 3], 2], [8, 3]])
    policy = make_policy(gym.spaces.Box(0, 255, (33, 33, 3), np.uint8), ACT,
                         conv_filters=[[8, [3, 3], 2], [16, 3, 2]], conv_activation="tanh")
    params = jax.eval_shape(policy.init, jax.random.PRNGKey(0))
    out = jax.eval_shape(policy.apply, params, jax.ShapeDtypeStruct((5, 33, 33, 3), np.uint8))
    assert out.shape == (5, 3)


def _dot_episodes(n, seed, length=32):
    """10x10 grayscale frames with one bright dot; the right action is the dot's column
    third (0, 1, 2). Frames are uint8, as an Atari-style recorder writes them."""
    rng = np.random.default_rng(seed)
    space = gym.spaces.Box(0, 255, (10, 10, 1), np.uint8)
    episodes = []
    for _ in range(n):
        frames = rng.integers(0, 40, (length + 1, 10, 10, 1)).astype(np.uint8)
        rows, cols = rng.integers(0, 10, length + 1), rng.integers(0, 10, length + 1)
        frames[np.arange(length + 1), rows, cols, 0] = 255
        actions = np.minimum(cols[:-1] * 3 // 10, 2)
        episodes.append(Episode(observations=frames, actions=actions,
                                rewards=np.zeros(length, np.float32), observation_space=space,
                                action_space=ACT))
    return episodes, space


@pytest.mark.slow
def test_cnn_bc_learns_a_small_image_task():
    episodes, space = _dot_episodes(16, seed=0)
    spaces = Spaces.of(space, ACT)
    pipe = default_learner(spaces)
    assert pipe.out_spaces(spaces).observation.shape == (10, 10, 1)  # not flattened
    batch = learner_batch(pipe, spaces, episodes)
    assert batch["obs"].dtype == np.uint8  # uint8 until the network scales it on the device
    policy = make_policy(space, ACT)
    params, losses = train_bc(policy, batch, steps=300, minibatch=128)
    test, _ = _dot_episodes(4, seed=1)
    obs = np.concatenate([ep.get_observations(slice(0, -1)) for ep in test])
    want = np.concatenate([ep.get_actions() for ep in test])
    accuracy = float(np.mean(np.asarray(policy.greedy_action(params, obs)) == want))
    assert accuracy > 0.9, (accuracy, losses[-5:])


def test_frame_stack_keeps_uint8_frames():
    episodes, space = _dot_episodes(2, seed=2, length=5)
    spaces = Spaces.of(space, ACT)
    pipe = default_learner(spaces, frame_stack(4))
    assert pipe.out_spaces(spaces).observation.shape == (10, 10, 4)
    batch = learner_batch(pipe, spaces, episodes)
    assert batch["obs"].dtype == np.uint8 and batch["obs"].shape[1:] == (10, 10, 4)


def test_whole_map_conv_is_the_valid_conv_it_replaces():
    """RLlib's last 84x84 layer (11x11 kernel on an 11x11 map) runs as a matrix product:
    same parameter tree and initial draws as `nn.Conv`, same outputs up to summation order."""
    x = jax.numpy.asarray(np.random.default_rng(0).normal(size=(3, 11, 11, 32)), np.float32)
    conv = nn.Conv(16, (11, 11), padding="VALID")
    conv_params = conv.init(jax.random.PRNGKey(1), x)
    whole_params = WholeMapConv(16).init(jax.random.PRNGKey(1), x)
    assert jax.tree_util.tree_all(jax.tree_util.tree_map(
        lambda a, b: a.shape == b.shape and bool((a == b).all()), conv_params, whole_params))
    want, got = conv.apply(conv_params, x), WholeMapConv(16).apply(conv_params, x)
    assert got.shape == want.shape == (3, 1, 1, 16)
    # Two summation orders of 11*11*32 products: at most n * eps * sum(|x| |k|) apart.
    k = conv_params["params"]["kernel"].reshape(-1, 16)
    bound = k.shape[0] * np.finfo(np.float32).eps * (np.abs(x).reshape(3, -1) @ np.abs(k))
    assert (np.abs(np.asarray(got - want)).reshape(3, 16) <= bound).all()
    policy = make_policy(gym.spaces.Box(0, 255, (84, 84, 4), np.uint8), ACT)
    params = jax.eval_shape(policy.init, jax.random.PRNGKey(0))
    assert params["params"]["encoder"]["CNNEncoder_0"]["Conv_2"]["kernel"].shape == (
        11, 11, 32, 256)
