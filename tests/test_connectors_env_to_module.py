"""Env-to-module pieces and the default env-to-module pipeline, jitted, against per-episode
numpy references of RLlib's semantics (the latest observation of each episode)."""

import functools

import gymnasium as gym
import jax
import numpy as np
import pytest
from connector_testlib import (
    ACT,
    DICT_OBS,
    OBS,
    NumpyMeanStd,
    random_episodes,
    run_jit,
    stacked_frames,
)
from jax.sharding import Mesh, PartitionSpec

from rljax_offline import EpisodeBatch
from rljax_offline import spaces as sp
from rljax_offline.connectors import (
    Context,
    Spaces,
    default_env_to_module,
    frame_stack,
    mean_std_filter,
    one_hot_observations,
    pipeline,
    prev_actions_rewards,
)
from rljax_offline.episode.episode import Episode

SPACES = Spaces.of(OBS, ACT)


def test_default_env_to_module_is_the_latest_observation():
    eps = random_episodes(seed=1)
    _, batch, _ = run_jit(default_env_to_module(SPACES), SPACES, eps)
    np.testing.assert_allclose(batch["obs"], np.stack([ep.get_observations(-1) for ep in eps]))


def test_frame_stack_env_to_module_and_out_spaces():
    eps = random_episodes(seed=2, max_len=5)
    pipe = default_env_to_module(SPACES, frame_stack(4))
    out = pipe.out_spaces(SPACES).observation
    assert out.shape == (12,) and out.low == (-10.0,) * 12
    _, batch, _ = run_jit(pipe, SPACES, eps)
    for i, ep in enumerate(eps):  # RLlib: get_observations(slice(-4, None), fill=0.0)
        want = ep.get_observations(slice(-4, None), fill=0.0).reshape(-1)
        np.testing.assert_allclose(batch["obs"][i], want)
        np.testing.assert_allclose(want, stacked_frames(ep, len(ep), 4))
    image = Spaces.of(gym.spaces.Box(0, 255, (5, 5, 1), np.uint8), ACT)
    assert frame_stack(4).out_spaces(image).observation.shape == (5, 5, 4)  # RLlib's shape


def test_mean_std_filter_env_to_module_pushes_each_latest_observation():
    """Stepping episodes one observation at a time through the env-to-module filter gives
    RLlib's push-one-at-a-time statistics; the batch is normalized with them."""
    eps = random_episodes(n=4, seed=3, lookback=False, min_len=5)
    pipe = pipeline(mean_std_filter(as_learner_connector=False))
    f = jax.jit(pipe.apply)
    state, ref = pipe.init(SPACES), NumpyMeanStd((3,))
    for t in range(5):  # every episode's prefix ending at observation t, with lookback
        windows = [ep[:t] if t else ep[:0] for ep in eps]
        windows = [EpisodeBatch.from_episodes([w], max_len=8) for w in windows]
        for w, ep in zip(windows, eps):
            e, _, state = f(state, w, {}, Context())
            ref.push(ep.get_observations(t))
            latest = np.asarray(e.observations)[0, w.len_lookback_buffer + t]
            np.testing.assert_allclose(latest, ref(ep.get_observations(t)), rtol=1e-4,
                                       atol=1e-4)
    (stats,) = state
    assert int(stats.count) == ref.n
    np.testing.assert_allclose(stats.mean, ref.mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats.std, ref.std, rtol=1e-4)


def test_mean_std_filter_per_step_statistics_keep_float32_precision_on_offset_data():
    """Observations far from zero with a small spread (mean 1000, std 0.05), long episodes,
    the learner's every-observation pushes: each row normalized as RLlib's float64
    one-at-a-time update does, within float32 rounding of the data (|x| 1e3 -> 6e-5 absolute,
    1.2e-3 in units of the std)."""
    rng = np.random.default_rng(7)
    eps = [Episode(observations=(1000 + 0.05 * rng.normal(size=(T + 1, 3))).astype(np.float32),
                   actions=np.zeros(T, np.int64), rewards=np.zeros(T, np.float32),
                   observation_space=gym.spaces.Box(-2e3, 2e3, (3,), np.float32),
                   action_space=ACT) for T in (300, 41, 257)]
    pipe = pipeline(mean_std_filter(as_learner_connector=True))
    episodes, _, (stats,) = run_jit(pipe, SPACES, eps)
    ref = NumpyMeanStd((3,))
    for i, ep in enumerate(eps):
        for t, x in enumerate(ep.get_observations()):
            ref.push(x.astype(np.float64))
            if t > 1:  # rows 0 and 1 of the first episode are 0 and +-1 by definition
                np.testing.assert_allclose(np.asarray(episodes.observations)[i, t], ref(x),
                                           atol=2e-2)
    assert int(stats.count) == ref.n
    np.testing.assert_allclose(stats.std, ref.std, rtol=1e-3)


def test_mean_std_filter_split_frozen_update_switch_and_saved_state():
    eps = random_episodes(n=6, seed=4)
    pipe = pipeline(mean_std_filter(as_learner_connector=True))
    f = jax.jit(pipe.apply)
    _, _, whole = f(pipe.init(SPACES), EpisodeBatch.from_episodes(eps), {}, Context())
    s = pipe.init(SPACES)
    for chunk in (eps[:1], eps[1:4], eps[4:]):  # the parallel merge is exact for any split
        _, _, s = f(s, EpisodeBatch.from_episodes(chunk), {}, Context())
    np.testing.assert_allclose(s[0].mean, whole[0].mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s[0].m2, whole[0].m2, rtol=1e-4)
    # Saved as plain numpy and restored: applying it gives the same observations.
    saved = jax.tree_util.tree_map(np.asarray, jax.device_get(whole))
    eb = EpisodeBatch.from_episodes(eps)
    e1, _, kept = f(saved, eb, {}, Context(frozen=True))
    np.testing.assert_array_equal(kept[0].count, saved[0].count)
    frozen_pipe = pipeline(mean_std_filter(update=False, as_learner_connector=True))
    e2, _, kept2 = jax.jit(frozen_pipe.apply)(saved, eb, {}, Context())
    np.testing.assert_array_equal(kept2[0].m2, saved[0].m2)
    # same statistics; the static no-push path skips the prefix merge: float32 rounding only
    np.testing.assert_allclose(e1.observations, e2.observations, rtol=4 * np.finfo(np.float32).eps)
    normed = np.asarray(e1.observations)[np.asarray(eb.obs_mask)
                                         & (np.arange(eb.observations.shape[1]) >=
                                            eb.len_lookback_buffer)]
    np.testing.assert_allclose(normed.mean(0), 0, atol=1e-4)
    assert pipe.out_spaces(SPACES).observation.high == (10.0,) * 3  # RLlib: Box(-clip, clip)


def test_mean_std_filter_on_dict_observations_leaves_discrete_alone():
    eps = random_episodes(n=4, seed=5, obs_space=DICT_OBS)
    spaces = Spaces.of(DICT_OBS, ACT)
    pipe = pipeline(mean_std_filter(as_learner_connector=True))
    e, _, (stats,) = run_jit(pipe, spaces, eps)
    pos = np.concatenate([ep.get_observations()["pos"] for ep in eps])
    ref = NumpyMeanStd((2,))
    for x in pos:
        ref.push(x)
    np.testing.assert_allclose(stats["pos"].mean, ref.mean, rtol=1e-5, atol=1e-6)
    assert stats["mode"] == ()
    eb = EpisodeBatch.from_episodes(eps)
    np.testing.assert_array_equal(e.observations["mode"], eb.observations["mode"])
    # then flattened by the defaults: Box(6,)
    full = default_env_to_module(spaces, mean_std_filter())
    assert full.out_spaces(spaces).observation.shape == (6,)
    _, batch, _ = run_jit(full, spaces, eps)
    latest = NumpyMeanStd((2,))  # env-to-module: each episode's latest observation, in order
    for i, ep in enumerate(eps):
        o = ep.get_observations(-1)
        latest.push(o["pos"])
        np.testing.assert_allclose(batch["obs"][i], np.concatenate(
            [np.eye(4)[o["mode"]], latest(o["pos"])]), rtol=1e-4, atol=1e-4)


def test_mean_std_filter_merges_statistics_across_devices():
    """With axis_name, 8 devices' shards give the statistics of the whole batch."""
    eps = random_episodes(n=8, seed=6)
    eb = EpisodeBatch.from_episodes(eps)
    pipe = pipeline(mean_std_filter(axis_name="data", as_learner_connector=True))
    _, _, whole = run_jit(pipeline(mean_std_filter(as_learner_connector=True)), SPACES, eps)
    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))

    @functools.partial(jax.shard_map, mesh=mesh, in_specs=(PartitionSpec(), PartitionSpec(
        "data")), out_specs=PartitionSpec(), check_vma=False)
    def per_device(state, eb):
        return pipe.apply(state, eb, {}, Context())[2]

    merged = jax.jit(per_device)(pipe.init(SPACES), eb)
    np.testing.assert_allclose(merged[0].count, whole[0].count)
    np.testing.assert_allclose(merged[0].mean, whole[0].mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(merged[0].m2, whole[0].m2, rtol=1e-4)


def test_one_hot_discrete_observations():
    space = gym.spaces.Discrete(5)
    spaces = Spaces.of(space, ACT)
    assert one_hot_observations().out_spaces(spaces).observation.shape == (5,)
    rng = np.random.default_rng(7)
    from rljax_offline import Episode
    eps = [Episode(observations=rng.integers(0, 5, T + 1), actions=rng.integers(0, 3, T),
                   rewards=np.zeros(T, np.float32), observation_space=space, action_space=ACT)
           for T in (3, 6)]
    pipe = default_env_to_module(spaces, one_hot_observations())
    _, batch, _ = run_jit(pipe, spaces, eps)
    np.testing.assert_array_equal(batch["obs"], np.eye(5)[[ep.get_observations(-1)
                                                           for ep in eps]])
    mixed = one_hot_observations().out_spaces(Spaces.of(DICT_OBS, ACT)).observation
    assert isinstance(mixed, sp.DictSpec) and dict(mixed.items())["mode"].shape == (4,)


def test_prev_actions_rewards_env_to_module():
    """RLlib's layout: Dict(_orig_obs, prev_n_actions one-hot, prev_n_rewards), then flattened
    by the defaults; zeros (an all-zero one-hot) before the episode's first step."""
    eps = random_episodes(seed=8)
    piece = prev_actions_rewards(2, 3)
    out = piece.out_spaces(SPACES).observation
    assert isinstance(out, sp.DictSpec)
    assert tuple(out.keys) == ("_orig_obs", "prev_n_actions", "prev_n_rewards")
    assert dict(out.items())["prev_n_actions"].shape == (2 * 3,)
    pipe = default_env_to_module(SPACES, piece)
    assert pipe.out_spaces(SPACES).observation.shape == (3 + 6 + 3,)
    for f in (jax.jit(pipe.apply), pipe.apply):
        _, batch, _ = f(pipe.init(SPACES), EpisodeBatch.from_episodes(eps), {}, Context())
        for i, ep in enumerate(eps):  # RLlib: get_actions(slice(-n, None), fill=0.0, one-hot)
            acts = ep.get_actions(slice(-2, None), fill=-1)
            one_hot = np.stack([np.eye(3)[a] if a >= 0 else np.zeros(3) for a in acts])
            want = np.concatenate([ep.get_observations(-1), one_hot.reshape(-1),
                                   ep.get_rewards(slice(-3, None), fill=0.0)])
            np.testing.assert_allclose(batch["obs"][i], want, rtol=1e-6)


def test_stateful_env_to_module_state_in_and_time_axis():
    rng = np.random.default_rng(9)
    from rljax_offline import Episode
    eps = [Episode(observations=rng.normal(size=(T + 1, 3)).astype(np.float32),
                   actions=rng.integers(0, 3, T), rewards=np.zeros(T, np.float32),
                   extra_model_outputs={"state_out": rng.normal(size=(T, 2)).astype(
                       np.float32)}, observation_space=OBS, action_space=ACT)
           for T in (1, 4, 6)]
    _, batch, _ = run_jit(default_env_to_module(SPACES, max_seq_len=4), SPACES, eps)
    assert batch["obs"].shape == (3, 1, 3) and np.all(np.asarray(batch["seq_lens"]) == 1)
    for b, ep in enumerate(eps):
        np.testing.assert_allclose(batch["state_in"][b],
                                   ep.get_extra_model_outputs("state_out", -1))


@pytest.mark.parametrize("jit", [True, False])
def test_stateful_env_to_module_initial_state_for_fresh_episodes(jit):
    """RLlib: an episode that just started (t_started 0, no step) gets the module's initial
    state, an ongoing one its latest state_out; no KeyError before the first state_out."""
    from rljax_offline import Episode

    init = {"h": np.full(2, 7.0, np.float32)}
    fresh = [Episode(observations=np.ones((1, 3), np.float32), actions=np.zeros(0, int),
                     rewards=np.zeros(0, np.float32), observation_space=OBS, action_space=ACT)]
    pipe = default_env_to_module(SPACES, max_seq_len=4, initial_state=init)
    _, batch, _ = run_jit(pipe, SPACES, fresh * 2, jit=jit)
    np.testing.assert_allclose(batch["state_in"]["h"], np.full((2, 2), 7.0))
    rng = np.random.default_rng(13)
    ongoing = [Episode(observations=rng.normal(size=(T + 1, 3)).astype(np.float32),
                       actions=np.zeros(T, int), rewards=np.zeros(T, np.float32),
                       extra_model_outputs={"state_out": {"h": rng.normal(size=(T, 2)).astype(
                           np.float32)}}, observation_space=OBS, action_space=ACT)
               for T in (0, 3)]
    _, batch, _ = run_jit(pipe, SPACES, ongoing, jit=jit)
    np.testing.assert_allclose(batch["state_in"]["h"][0], init["h"])
    np.testing.assert_allclose(batch["state_in"]["h"][1],
                               ongoing[1].get_extra_model_outputs("state_out", -1)["h"])


def test_model_connectors_add_previous_action_and_reward_for_the_lstm():
    assert default_env_to_module(SPACES).out_spaces(SPACES).observation.shape == (3,)
    from rljax_offline.connectors import model_connectors

    assert model_connectors({"use_lstm": True}) == []
    pieces = model_connectors({"lstm_use_prev_action": True, "lstm_use_prev_reward": True})
    assert default_env_to_module(SPACES, *pieces).out_spaces(SPACES).observation.shape == (7,)
    image = Spaces.of(gym.spaces.Box(0, 255, (10, 10, 3), np.uint8), ACT)
    assert default_env_to_module(image).out_spaces(image).observation.shape == (10, 10, 3)


def _rllib_replay(obs, order, k=4):
    """RLlib's env-to-module `obs` for each call of a lockstep replay of `obs` [T, N, d]:
    `MeanStdFilter` pushes each episode's newest observation, normalizes it and writes it back
    into the episode; `FrameStackingEnvToModule` reads the episode's last `k` observations
    (zeros before the first). `order` "filter_stack" or "stack_filter"."""
    T, N, d = obs.shape
    episodes = [[] for _ in range(N)]
    stats = NumpyMeanStd((d * k,) if order == "stack_filter" else (d,))
    calls = []
    for t in range(T):
        out = []
        for i in range(N):
            episodes[i].append(obs[t, i].astype(np.float64))
            if order == "filter_stack":
                stats.push(episodes[i][-1])
                episodes[i][-1] = stats(episodes[i][-1])  # set_observations(at_indices=-1)
            frames = ([np.zeros(d)] * k + episodes[i])[-k:]
            x = np.concatenate(frames)
            if order == "stack_filter":
                stats.push(x)
                x = stats(x)
            out.append(x)
        calls.append(np.stack(out))
    return calls


@pytest.mark.parametrize("order", ["filter_stack", "stack_filter"])
def test_filter_then_frame_stack_reads_past_frames_as_normalized_at_their_step(order):
    """A 6-episode lockstep replay: the env-to-module pipeline stepped as RLlib steps its live
    episodes (jitted, `apply_writing_back`) and the actor with learning statistics give RLlib's
    numbers in both orders (the first frame of episode 0 at call 1: 0, the first observation
    ever pushed)."""
    from rljax_offline.acting.actor import ModulePolicy, make_actor
    from rljax_offline.connectors import apply_writing_back
    from rljax_offline.episode.builder import EpisodeBuilder

    rng = np.random.default_rng(0)
    T, N, k = 5, 6, 4
    obs = (rng.normal(size=(T, N, 3)) * [1.0, 2.0, 0.5] + [0.5, -1.0, 2.0]).astype(np.float32)
    want = _rllib_replay(obs, order, k)
    pieces = ((mean_std_filter(), frame_stack(k)) if order == "filter_stack"
              else (frame_stack(k), mean_std_filter()))
    pipe = default_env_to_module(SPACES, *pieces)
    f = jax.jit(functools.partial(apply_writing_back, pipe))
    state, held = pipe.init(SPACES), [[] for _ in range(N)]
    for t in range(T):
        eps = [EpisodeBuilder(observations=[*held[i], obs[t, i]], actions=[0] * t,
                              rewards=[0.0] * t).finalize() for i in range(N)]
        batch_eps = EpisodeBatch.from_episodes(eps, max_len=8)
        _, batch, state, written = f(state, batch_eps, {}, Context(written_back=True))
        np.testing.assert_allclose(batch["obs"], want[t], rtol=1e-4, atol=1e-4,
                                   err_msg=f"env-to-module call {t}")
        L = batch_eps.len_lookback_buffer
        held = [list(np.asarray(written)[i, L:L + t + 1]) for i in range(N)]
    if order == "filter_stack":  # the issue's frame: episode 0's first, at call 1
        np.testing.assert_allclose(want[1][0, 2 * 3:3 * 3], 0.0, atol=1e-12)

    act = Spaces.of(OBS, gym.spaces.Box(-np.inf, np.inf, (3 * k,), np.float32))
    actor = make_actor(ModulePolicy(lambda x: x), act, default_env_to_module(act, *pieces),
                       update_env_to_module=True)
    got, s = actor.select_action(None, actor.init(obs[0], jax.random.PRNGKey(0)))[0::2]
    np.testing.assert_allclose(got, want[0], rtol=1e-4, atol=1e-4)
    for t in range(1, T):
        got, _, s = actor.step(None, s, np.zeros(N, np.float32), obs[t], np.zeros(N, bool))
        np.testing.assert_allclose(got, want[t], rtol=1e-4, atol=1e-4, err_msg=f"actor {t}")
