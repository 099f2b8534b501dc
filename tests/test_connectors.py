"""Connector pieces and default pipelines, jitted, against plain-numpy per-episode references
of RLlib's semantics; padding never leaks; custom pieces in a few lines."""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax_offline import Episode, EpisodeBatch
from rljax_offline.connectors import (
    Connector,
    Context,
    Spaces,
    add_columns,
    clip_actions,
    clip_rewards,
    default_env_to_module,
    default_learner,
    default_module_to_env,
    flatten_observations,
    frame_stack,
    get_actions,
    mean_std_filter,
    pipeline,
    prev_actions_rewards,
    stateless,
)

OBS = gym.spaces.Box(-10, 10, (3,), np.float32)
ACT = gym.spaces.Discrete(3)


def random_episodes(n=5, seed=0, max_len=12, lookback=True, obs_space=OBS):
    rng = np.random.default_rng(seed)
    eps = []
    for i in range(n):
        T = int(rng.integers(1, max_len))
        L = int(rng.integers(0, 3)) if lookback else 0
        if isinstance(obs_space, gym.spaces.Dict):
            obs = {"pos": rng.normal(size=(T + L + 1, 2)).astype(np.float32),
                   "mode": rng.integers(0, 4, T + L + 1)}
        else:
            obs = rng.normal(size=(T + L + 1, 3)).astype(np.float32)
        eps.append(Episode(observations=obs, actions=rng.integers(0, 3, T + L),
                           rewards=rng.normal(size=T + L).astype(np.float32) * 3,
                           extra_model_outputs={"action_logp": rng.normal(
                               size=T + L).astype(np.float32)},
                           terminated=bool(i % 2), truncated=not i % 2 and i % 3 == 0,
                           len_lookback_buffer=L, observation_space=obs_space,
                           action_space=ACT))
    return eps


def run_jit(pipe, spaces, episodes, ctx=None, state=None):
    ctx = Context() if ctx is None else ctx
    batch = EpisodeBatch.from_episodes(episodes)
    state = pipe.init(spaces) if state is None else state
    return jax.jit(pipe.apply)(state, batch, {}, ctx)


def test_default_learner_matches_per_episode_reference():
    eps = random_episodes()
    spaces = Spaces.of(OBS, ACT)
    _, batch, _ = run_jit(default_learner(spaces), spaces, eps)
    mask = np.asarray(batch["loss_mask"])
    got = {k: np.asarray(v)[mask] for k, v in batch.items()}
    ref = {k: [] for k in ("obs", "new_obs", "actions", "rewards", "terminateds",
                           "truncateds", "action_logp")}
    for ep in eps:  # RLlib: every observation that has an action, and its successor
        T = len(ep)
        ref["obs"].append(ep.get_observations(slice(0, T)))
        ref["new_obs"].append(ep.get_observations(slice(1, T + 1)))
        ref["actions"].append(ep.get_actions())
        ref["rewards"].append(ep.get_rewards())
        flag = np.zeros(T, bool)
        ref["terminateds"].append(np.where(np.arange(T) == T - 1, ep.is_terminated, flag))
        ref["truncateds"].append(np.where(np.arange(T) == T - 1, ep.is_truncated, flag))
        ref["action_logp"].append(ep.get_extra_model_outputs("action_logp"))
    for k, v in ref.items():
        np.testing.assert_allclose(got[k], np.concatenate(v), err_msg=k)
    assert mask.sum() == sum(len(e) for e in eps)


def test_padding_never_leaks():
    eps = random_episodes(seed=1)
    spaces = Spaces.of(OBS, ACT)
    pipe = default_learner(spaces, frame_stack(3), mean_std_filter())
    batch = EpisodeBatch.from_episodes(eps)
    noisy = batch.replace(
        observations=np.where(batch.obs_mask[..., None], batch.observations, 1e4).astype(
            np.float32),
        rewards=np.where(batch.lookback_mask, batch.rewards, -1e4).astype(np.float32))
    f = jax.jit(pipe.apply)
    _, a, sa = f(pipe.init(spaces), batch, {}, Context())
    _, b, sb = f(pipe.init(spaces), noisy, {}, Context())
    m = np.asarray(a["loss_mask"])
    for k in ("obs", "rewards", "new_obs"):
        np.testing.assert_allclose(np.asarray(a[k])[m], np.asarray(b[k])[m], rtol=1e-5)
    np.testing.assert_allclose(sa[1].mean, sb[1].mean, rtol=1e-5)


def test_frame_stack_reference_with_zero_fill():
    eps = random_episodes(seed=2)
    spaces = Spaces.of(OBS, ACT)
    pipe = default_learner(spaces, frame_stack(4))
    assert pipe.out_spaces(spaces).observation.shape == (12,)
    _, batch, _ = run_jit(pipe, spaces, eps)
    got = np.asarray(batch["obs"])[np.asarray(batch["loss_mask"])]
    ref = []
    for ep in eps:
        for t in range(len(ep)):
            frames = ep.get_observations(slice(t - 3, t + 1), neg_index_as_lookback=True,
                                         fill=0.0)
            ref.append(frames.reshape(-1))
    np.testing.assert_allclose(got, np.stack(ref))
    # Env-to-module: the same piece stacks the latest observation's frames.
    e2m = default_env_to_module(spaces, frame_stack(4))
    _, b2, _ = run_jit(e2m, spaces, eps)
    for i, ep in enumerate(eps):
        want = ep.get_observations(slice(-4, None), fill=0.0).reshape(-1)
        np.testing.assert_allclose(np.asarray(b2["obs"])[i], want)


def test_mean_std_filter_statistics_and_freeze():
    eps = random_episodes(n=6, seed=3)
    spaces = Spaces.of(OBS, ACT)
    pipe = pipeline(mean_std_filter())
    b = EpisodeBatch.from_episodes(eps)
    f = jax.jit(pipe.apply)
    e, _, (stats,) = f(pipe.init(spaces), b, {}, Context())
    every = np.concatenate([np.asarray(ep.observations) for ep in eps])
    np.testing.assert_allclose(stats.mean, every.mean(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(stats.m2 / stats.count, every.var(0), rtol=1e-3)
    # Split updates give the same statistics (parallel merge is exact).
    s = pipe.init(spaces)
    for chunk in (eps[:2], eps[2:]):
        _, _, s = f(s, EpisodeBatch.from_episodes(chunk), {}, Context())
    np.testing.assert_allclose(s[0].mean, stats.mean, rtol=1e-5, atol=1e-6)
    # Frozen: the state does not move, observations normalized with it.
    _, _, frozen = f((stats,), b, {}, Context(frozen=True))
    np.testing.assert_array_equal(frozen[0].count, stats.count)
    normed = np.asarray(e.observations)[np.asarray(b.obs_mask)]
    np.testing.assert_allclose(normed.mean(0), 0, atol=1e-4)


def test_flatten_dict_observations_with_one_hot():
    space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,)), "mode": gym.spaces.Discrete(4)})
    eps = random_episodes(seed=4, obs_space=space)
    spaces = Spaces.of(space, ACT)
    pipe = default_learner(spaces)
    assert pipe.out_spaces(spaces).observation.shape == (6,)
    _, batch, _ = run_jit(pipe, spaces, eps)
    got = np.asarray(batch["obs"])[np.asarray(batch["loss_mask"])]
    ref = np.concatenate([
        np.concatenate([np.eye(4)[ep.get_observations()["mode"][:-1]],
                        ep.get_observations()["pos"][:-1]], axis=1)
        for ep in eps])
    np.testing.assert_allclose(got, ref)


def test_prev_actions_rewards_reference():
    eps = random_episodes(seed=5)
    spaces = Spaces.of(OBS, ACT)
    pipe = pipeline(prev_actions_rewards(2, 3, as_learner_connector=True), add_columns())
    _, batch, _ = run_jit(pipe, spaces, eps)
    m = np.asarray(batch["loss_mask"])
    ref_a, ref_r = [], []
    for ep in eps:
        for t in range(len(ep)):
            ref_a.append(ep.get_actions(slice(t - 2, t), neg_index_as_lookback=True, fill=0))
            ref_r.append(ep.get_rewards(slice(t - 3, t), neg_index_as_lookback=True, fill=0.0))
    np.testing.assert_array_equal(np.asarray(batch["prev_n_actions"])[m], np.stack(ref_a))
    np.testing.assert_allclose(np.asarray(batch["prev_n_rewards"])[m], np.stack(ref_r))
    e2m = pipeline(prev_actions_rewards(2, 3))
    _, b2, _ = run_jit(e2m, spaces, eps)
    for i, ep in enumerate(eps):
        np.testing.assert_array_equal(np.asarray(b2["prev_n_actions"])[i],
                                      ep.get_actions(slice(-2, None), fill=0))


def test_clip_rewards():
    eps = random_episodes(seed=6)
    spaces = Spaces.of(OBS, ACT)
    _, batch, _ = run_jit(pipeline(add_columns(), clip_rewards(1.0)), spaces, eps)
    assert np.abs(np.asarray(batch["rewards"])).max() <= 1.0
    _, batch, _ = run_jit(pipeline(add_columns(), clip_rewards(sign=True)), spaces, eps)
    assert set(np.unique(np.asarray(batch["rewards"]))) <= {-1.0, 0.0, 1.0}


def test_module_to_env_sample_argmax_clip_unsquash():
    eps = random_episodes(n=4, seed=7)
    spaces = Spaces.of(OBS, ACT)
    m2e = default_module_to_env(spaces)
    logits = np.array([[0, 5, 0], [9, 0, 0], [0, 0, 9], [1, 2, 3]], np.float32)
    _, out, _ = jax.jit(m2e.apply)(
        m2e.init(spaces), EpisodeBatch.from_episodes(eps), {"action_dist_inputs": logits},
        Context(rng=jax.random.PRNGKey(0), explore=False))
    np.testing.assert_array_equal(out["actions"], [1, 0, 2, 2])
    sampled = [np.asarray(jax.jit(m2e.apply)(
        m2e.init(spaces), EpisodeBatch.from_episodes(eps),
        {"action_dist_inputs": np.zeros((4, 3), np.float32)},
        Context(rng=jax.random.PRNGKey(s), explore=True))[1]["actions"]) for s in range(20)]
    assert len(np.unique(np.concatenate(sampled))) == 3
    box = gym.spaces.Box(np.array([-2.0], np.float32), np.array([1.0], np.float32))
    beps = [e.replace(actions=np.zeros((len(e.actions), 1), np.float32), action_space=box)
            for e in eps]
    pipe = pipeline(get_actions(), clip_actions())
    inputs = np.array([[5.0, 0.0], [-5.0, 0.0], [0.5, 0.0], [0.0, 0.0]], np.float32)
    bspaces = Spaces.of(OBS, box)
    _, out, _ = jax.jit(pipe.apply)(pipe.init(bspaces), EpisodeBatch.from_episodes(beps),
                                    {"action_dist_inputs": inputs}, Context())
    np.testing.assert_allclose(out["actions_for_env"][:, 0], [1.0, -2.0, 0.5, 0.0])
    un = pipeline(get_actions(), clip_actions(unsquash=True))
    _, out, _ = jax.jit(un.apply)(un.init(bspaces), EpisodeBatch.from_episodes(beps),
                                  {"action_dist_inputs": inputs}, Context())
    np.testing.assert_allclose(out["actions_for_env"][:, 0], [1.0, -2.0, 0.25, -0.5])


def test_custom_pieces_like_the_guide():
    """RLlib's guide: AddNewColumnToBatch and AddPast3Rewards, each a few lines here."""

    def add_new_column(episodes, batch, ctx):
        return episodes, {**batch, "new_col": jnp.ones(episodes.batch_size)}

    def add_past_3_rewards(episodes, batch, ctx):
        L = episodes.len_lookback_buffer
        rew = jnp.where(episodes.lookback_mask, episodes.rewards, 0.0)
        rew = jnp.pad(rew, [(0, 0), (3, 1)])
        idx = 3 + L + episodes.lengths[:, None] + jnp.arange(-3, 0)[None]
        return episodes, {**batch, "past_3_rewards": jnp.take_along_axis(rew, idx, 1)}

    spaces = Spaces.of(OBS, ACT)
    pipe = default_env_to_module(spaces, stateless(add_new_column),
                                 stateless(add_past_3_rewards))
    eps = random_episodes(seed=8)
    _, batch, _ = run_jit(pipe, spaces, eps)
    assert batch["obs"].shape == (5, 3) and np.all(np.asarray(batch["new_col"]) == 1)
    for i, ep in enumerate(eps):
        np.testing.assert_allclose(np.asarray(batch["past_3_rewards"])[i],
                                   ep.get_rewards(slice(-3, None), fill=0.0))


def test_defaults_can_be_left_out_and_pipelines_nest():
    spaces = Spaces.of(OBS, ACT)
    assert default_learner(spaces, add_default_connectors=False).init(spaces) == ()
    inner = pipeline(frame_stack(2), mean_std_filter())
    outer = pipeline(inner, flatten_observations())
    assert outer.out_spaces(spaces).observation.shape == (6,)
    state = outer.init(spaces)
    assert isinstance(state[0][1].mean, jax.Array)
    with pytest.raises(ValueError, match="state for 2 pieces"):
        inner.apply((), EpisodeBatch.from_episodes(random_episodes(1)), {}, Context())
    with pytest.raises(TypeError, match="not a Connector"):
        pipeline(lambda x: x)
    assert isinstance(inner, Connector)


def test_add_time_dim_and_states_reference():
    rng = np.random.default_rng(9)
    eps = []
    for i, T in enumerate((7, 3, 10)):
        L = i % 2
        eps.append(Episode(observations=rng.normal(size=(T + L + 1, 3)).astype(np.float32),
                           actions=rng.integers(0, 3, T + L),
                           rewards=rng.normal(size=T + L).astype(np.float32),
                           extra_model_outputs={"state_out": rng.normal(
                               size=(T + L, 2)).astype(np.float32)},
                           len_lookback_buffer=L, observation_space=OBS, action_space=ACT))
    spaces = Spaces.of(OBS, ACT)
    S = 4
    pipe = default_learner(spaces, max_seq_len=S)
    _, batch, _ = run_jit(pipe, spaces, eps)
    T_pad = EpisodeBatch.from_episodes(eps).max_len
    K = -(-T_pad // S)
    assert batch["obs"].shape == (3 * K, S, 3) and batch["seq_lens"].shape == (3 * K,)
    assert batch["state_in"].shape == (3 * K, 2)
    for b, ep in enumerate(eps):
        T = len(ep)
        for k in range(K):
            row = b * K + k
            n = int(np.clip(T - k * S, 0, S))
            assert int(batch["seq_lens"][row]) == n
            np.testing.assert_array_equal(np.asarray(batch["loss_mask"][row]),
                                          np.arange(S) < n)
            if n:
                np.testing.assert_allclose(batch["obs"][row][:n],
                                           ep.get_observations(slice(k * S, k * S + n)))
                np.testing.assert_allclose(batch["obs"][row][n:], 0)
            want = ep.get_extra_model_outputs("state_out", k * S - 1,
                                              neg_index_as_lookback=True, fill=0.0)
            np.testing.assert_allclose(batch["state_in"][row], want)
    e2m = default_env_to_module(spaces, max_seq_len=S)
    _, b2, _ = run_jit(e2m, spaces, eps)
    assert b2["obs"].shape == (3, 1, 3) and np.all(np.asarray(b2["seq_lens"]) == 1)
    for b, ep in enumerate(eps):
        np.testing.assert_allclose(b2["state_in"][b, 0], ep.get_extra_model_outputs(
            "state_out", -1))


def test_count_based_intrinsic_reward_matches_the_guide():
    from collections import Counter

    from rljax_offline.connectors import count_based_intrinsic_reward

    rng = np.random.default_rng(10)
    eps = [Episode(observations=rng.integers(0, 3, size=(T + 1, 2)).astype(np.float32),
                   actions=np.zeros(T, int), rewards=np.ones(T, np.float32),
                   observation_space=OBS.__class__(-10, 10, (2,), np.float32),
                   action_space=ACT) for T in (6, 9, 4)]
    spaces = Spaces.of(eps[0].observation_space, ACT)
    pipe = default_learner(spaces, count_based_intrinsic_reward())
    state = pipe.init(spaces)
    counts = Counter()
    for chunk in (eps[:2], eps[2:]):  # the counts carry over between batches in the state
        _, batch, state = run_jit(pipe, spaces, chunk, state=state)
        want = []
        for ep in chunk:  # the guide's loop, on Python tuples
            for obs, rew in zip(ep.get_observations(slice(None, -1)), ep.get_rewards()):
                counts[tuple(obs)] += 1
                want.append(rew + 1 / counts[tuple(obs)])
        got = np.asarray(batch["rewards"])[np.asarray(batch["loss_mask"])]
        np.testing.assert_allclose(got, want, rtol=1e-6)
