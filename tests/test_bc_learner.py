"""The BC learner: one per-device update run by shard_map over 8 fake CPU devices equals one
device; the same function under jax.pmap equals shard_map; errors for bad batch sizes."""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from learner_testlib import cartpole_bc_parts

from rljax_offline.experts import cartpole_expert
from rljax_offline.learners.bc import (
    DataParallel,
    init_state,
    make_optimizer,
    make_update,
    prefetch_to_device,
    select_devices,
)
from rljax_offline.models.policy import make_policy
from rljax_offline.runners.env_runner import EnvRunner


@pytest.fixture(scope="module")
def setup():
    return cartpole_bc_parts((64, 64), 4096)


def max_diff(a, b):
    return max(jax.tree_util.tree_leaves(jax.tree_util.tree_map(
        lambda x, y: float(np.max(np.abs(np.asarray(x) - np.asarray(y)))), a, b)))


def test_eight_devices_match_one(setup):
    policy, opt, data = setup
    assert len(jax.local_devices()) == 8, "conftest must force 8 host devices"
    params = {}
    for n in (1, 8):
        dp = DataParallel(make_update(policy, opt), select_devices(n), 512)
        state = dp.put_replicated(init_state(policy, opt, seed=0))
        state, metrics = dp.scan_on_device(30)(state, dp.put_replicated(data))
        params[n] = jax.device_get(state.params)
        assert int(state.step) == 30
    assert max_diff(params[1], params[8]) < 1e-5


def test_pmap_equals_shard_map(setup):
    policy, opt, data = setup
    update = make_update(policy, opt)
    dp = DataParallel(update, select_devices(8), 512)
    state = init_state(policy, opt, seed=1)
    rng = np.random.default_rng(1)
    for _ in range(3):
        idx = rng.integers(0, 4096, 512)
        batch = {k: v[idx] for k, v in data.items()}
        replicated = jax.tree_util.tree_map(lambda x: jnp.stack([x] * 8), state)
        shards = jax.tree_util.tree_map(lambda x: x.reshape(8, 64, *x.shape[1:]), batch)
        p_state, p_metrics = jax.pmap(update, axis_name="data")(replicated, shards)
        s_state, s_metrics = dp.step(dp.put_replicated(state), dp.put_sharded(batch))
        assert max_diff(jax.tree_util.tree_map(lambda x: x[0], p_state.params),
                        s_state.params) < 1e-6
        np.testing.assert_allclose(p_metrics["policy_loss"][0], s_metrics["policy_loss"],
                                   rtol=1e-6)
        state = jax.tree_util.tree_map(lambda x: np.asarray(x)[0], p_state)


def test_masked_rows_do_not_count(setup):
    policy, opt, data = setup
    dp = DataParallel(make_update(policy, opt), select_devices(8), 64)
    state = jax.device_get(init_state(policy, opt, seed=2))
    batch = {k: v[:64] for k, v in data.items()}
    mask = np.arange(64) % 3 != 0
    junk = dict(batch, obs=np.where(mask[:, None], batch["obs"], 1e3).astype(np.float32),
                loss_mask=mask)
    clean = dict(batch, loss_mask=mask)
    a, ma = dp.step(dp.put_replicated(state), dp.put_sharded(clean))
    b, mb = dp.step(dp.put_replicated(state), dp.put_sharded(junk))
    assert max_diff(a.params, b.params) < 1e-6
    assert float(ma["num_module_steps_trained"]) == mask.sum()


def test_batch_must_divide_over_devices(setup):
    policy, opt, _ = setup
    with pytest.raises(ValueError, match="does not divide over 8 devices"):
        DataParallel(make_update(policy, opt), select_devices(8), 100)
    with pytest.raises(ValueError, match="local devices exist"):
        select_devices(99)


def test_gaussian_policy_logp_and_greedy():
    policy = make_policy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (2,)), (16,))
    params = policy.init(jax.random.PRNGKey(0))
    inputs = policy.apply(params, jnp.zeros((5, 3)))
    assert inputs.shape == (5, 4)
    mean = policy.dist.greedy(inputs)
    lp = policy.dist.logp(inputs, mean)
    np.testing.assert_allclose(lp, -policy.dist.entropy(inputs) + 1.0, rtol=1e-5)


def test_streamed_updates_equal_the_step_loop(setup):
    policy, opt, data = setup
    dp = DataParallel(make_update(policy, opt), select_devices(4), 256)
    rng = np.random.default_rng(3)
    batches = [{k: v[idx] for k, v in data.items()}
               for idx in (rng.integers(0, 4096, 256) for _ in range(5))]
    state = dp.put_replicated(init_state(policy, opt, seed=3))
    losses = []
    for b in batches:
        state, m = dp.step(state, dp.put_sharded(b))
        losses.append(float(m["policy_loss"]))
    stream = prefetch_to_device(iter(batches), dp.sharded, size=2)
    streamed = dp.put_replicated(init_state(policy, opt, seed=3))
    streamed, m = dp.stream_updates(streamed, stream, 3)
    streamed, m = dp.stream_updates(streamed, stream, 2)  # the in-flight batches carry over
    assert max_diff(state.params, streamed.params) == 0.0
    np.testing.assert_allclose(float(m["policy_loss_mean"]), np.mean(losses[3:]), rtol=1e-6)
    with pytest.raises(StopIteration):
        next(stream)
    with pytest.raises(ValueError, match="exactly train_batch_size_per_learner=256"):
        dp.stream_updates(streamed, iter([{k: v[:100] for k, v in data.items()}]), 1)


def test_bc_on_cartpole_expert_data_reaches_450():
    """Expert episodes from the runner, kept in memory; BC on 2 devices; greedy evaluation."""
    episodes = EnvRunner("CartPole-v1", cartpole_expert, num_envs=4, seed=0).sample(
        num_episodes=20)
    data = {"obs": np.concatenate([ep.observations[:-1] for ep in episodes]).astype(np.float32),
            "actions": np.concatenate([ep.actions for ep in episodes]).astype(np.int32)}
    policy = make_policy(gym.spaces.Box(-5, 5, (4,)), gym.spaces.Discrete(2))
    opt = make_optimizer(1e-3)
    dp = DataParallel(make_update(policy, opt), select_devices(2), 512)
    scan = dp.scan_on_device(100)
    state = dp.put_replicated(init_state(policy, opt, seed=0))
    greedy = jax.jit(policy.greedy_action)
    best = 0.0
    for _ in range(5):
        state, metrics = scan(state, dp.put_replicated(data))
        params = jax.device_get(state.params)
        stats = EnvRunner("CartPole-v1", lambda obs, p=params: np.asarray(greedy(p, obs)),
                          num_envs=5, seed=100).evaluate(5)
        best = max(best, stats["episode_return_mean"])
        if best >= 450:
            break
    assert best >= 450, best
    assert float(metrics["policy_loss"]) < 0.5  # from ln 2 = 0.69 at the start
