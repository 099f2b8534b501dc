"""Learner pieces and the default learner pipeline, jitted, against per-episode numpy
references of RLlib's semantics; padding never leaks into a column."""

from collections import Counter

import jax
import numpy as np
import pytest
from connector_testlib import (
    ACT,
    DICT_OBS,
    OBS,
    NumpyMeanStd,
    learner_reference,
    random_episodes,
    real_rows,
    run_jit,
    stacked_frames,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from rljax_offline import Episode, EpisodeBatch
from rljax_offline.connectors import (
    Context,
    Spaces,
    add_columns,
    add_observations,
    clip_rewards,
    count_based_intrinsic_reward,
    default_learner,
    frame_stack,
    mean_std_filter,
    pipeline,
    prev_actions_rewards,
)

SPACES = Spaces.of(OBS, ACT)


def test_default_learner_matches_per_episode_reference():
    eps = random_episodes()
    _, batch, _ = run_jit(default_learner(SPACES), SPACES, eps)
    got, ref = real_rows(batch), learner_reference(eps)
    for k, v in ref.items():
        np.testing.assert_allclose(got[k], v, err_msg=k)
    assert np.asarray(batch["loss_mask"]).sum() == sum(len(e) for e in eps)
    assert batch["obs"].shape[0] == batch["loss_mask"].shape[0]  # flat [B * T, ...]


def test_default_learner_flattens_dict_observations():
    eps = random_episodes(seed=4, obs_space=DICT_OBS)
    spaces = Spaces.of(DICT_OBS, ACT)
    pipe = default_learner(spaces)
    assert pipe.out_spaces(spaces).observation.shape == (6,)
    _, batch, _ = run_jit(pipe, spaces, eps)

    def flat_obs(ep, t):  # RLlib's FlattenObservations: keys in order, Discrete one-hot
        o = ep.get_observations(t)
        return np.concatenate([np.eye(4)[o["mode"]], o["pos"]])

    ref = learner_reference(eps, flat_obs)
    got = real_rows(batch)
    np.testing.assert_allclose(got["obs"], ref["obs"])
    np.testing.assert_allclose(got["new_obs"], ref["new_obs"])


def test_frame_stack_and_filter_in_the_learner_match_rllib():
    """frame_stack(4) then the mean-std filter (learner mode): RLlib pushes each stacked
    observation in episode and time order and normalizes it with the statistics as of then."""
    eps = random_episodes(seed=2)
    pipe = default_learner(SPACES, frame_stack(4), mean_std_filter(as_learner_connector=True))
    assert pipe.out_spaces(SPACES).observation.shape == (12,)
    _, batch, _ = run_jit(pipe, SPACES, eps)
    ref, normed = NumpyMeanStd((12,)), {}
    for i, ep in enumerate(eps):
        for t in range(len(ep) + 1):
            ref.push(stacked_frames(ep, t, 4))
            normed[i, t] = ref(stacked_frames(ep, t, 4))
    index = {id(ep): i for i, ep in enumerate(eps)}
    want = learner_reference(eps, lambda ep, t: normed[index[id(ep)], t])
    got = real_rows(batch)
    np.testing.assert_allclose(got["obs"], want["obs"], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got["new_obs"], want["new_obs"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("jit", [True, False])
def test_filter_then_frame_stack_stacks_the_per_step_normalized_values(jit):
    """The filter writes each observation back normalized as of its own push, so frame
    stacking after it stacks those values, as RLlib's episodes hold them."""
    eps = random_episodes(seed=14, lookback=False)
    pipe = default_learner(SPACES, mean_std_filter(as_learner_connector=True), frame_stack(3))
    _, batch, _ = run_jit(pipe, SPACES, eps, jit=jit)
    ref, rows = NumpyMeanStd((3,)), []
    for ep in eps:
        normed = []
        for t in range(len(ep) + 1):
            ref.push(ep.get_observations(t))
            normed.append(ref(ep.get_observations(t)))
        normed = np.concatenate([np.zeros((2, 3)), np.stack(normed)])
        rows += [normed[t:t + 3].reshape(-1) for t in range(len(ep))]
    np.testing.assert_allclose(real_rows(batch)["obs"], np.stack(rows), rtol=1e-4, atol=1e-4)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), noise=st.floats(-1e4, 1e4, allow_nan=False))
def test_padding_never_leaks(seed, noise):
    """Changing every padded value changes no real row and no masked sum; padding rows are
    zero with loss_mask False."""
    eps = random_episodes(seed=seed)
    pipe = default_learner(SPACES, frame_stack(3), mean_std_filter(as_learner_connector=True),
                           prev_actions_rewards(2, 2, as_learner_connector=True))
    eb = EpisodeBatch.from_episodes(eps)
    noisy = eb.replace(
        observations=np.where(eb.obs_mask[..., None], eb.observations, noise).astype(np.float32),
        actions=np.where(eb.lookback_mask, eb.actions, 2),
        rewards=np.where(eb.lookback_mask, eb.rewards, noise).astype(np.float32),
        extra_model_outputs={"action_logp": np.where(
            eb.lookback_mask, eb.extra_model_outputs["action_logp"], noise).astype(np.float32)})
    f = jax.jit(pipe.apply)
    _, a, sa = f(pipe.init(SPACES), eb, {}, Context())
    _, b, sb = f(pipe.init(SPACES), noisy, {}, Context())
    m = np.asarray(a["loss_mask"])
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5, err_msg=k)
        assert not np.any(x[~m]), f"padding rows of {k!r} are not zero"
        mm = m.reshape(-1, *([1] * (x.ndim - 1)))
        np.testing.assert_allclose(np.sum(x * mm, 0), np.sum(y * mm, 0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(sa[1].mean, sb[1].mean, rtol=1e-5)
    np.testing.assert_allclose(sa[1].m2, sb[1].m2, rtol=1e-4)


def test_prev_actions_rewards_as_learner_connector():
    """Every step's observation carries the actions/rewards before it (lookback included),
    as RLlib's episodes hold them after the env-to-module piece wrote them back."""
    eps = random_episodes(seed=5)
    pipe = default_learner(SPACES, prev_actions_rewards(2, 3, as_learner_connector=True))
    assert pipe.out_spaces(SPACES).observation.shape == (3 + 2 * 3 + 3,)
    _, batch, _ = run_jit(pipe, SPACES, eps)
    got = real_rows(batch)

    def augmented(ep, t):
        acts = ep.get_actions(slice(t - 2, t), neg_index_as_lookback=True, fill=-1)
        one_hot = np.stack([np.eye(3)[a] if a >= 0 else np.zeros(3) for a in acts])
        return np.concatenate([ep.get_observations(t), one_hot.reshape(-1), ep.get_rewards(
            slice(t - 3, t), neg_index_as_lookback=True, fill=0.0)])

    ref = learner_reference(eps, augmented)
    np.testing.assert_allclose(got["obs"], ref["obs"], rtol=1e-6)
    np.testing.assert_allclose(got["new_obs"], ref["new_obs"], rtol=1e-6)


def test_clip_rewards():
    eps = random_episodes(seed=6)
    _, batch, _ = run_jit(pipeline(add_columns(), clip_rewards(1.0)), SPACES, eps)
    want = np.clip(np.concatenate([ep.get_rewards() for ep in eps]), -1, 1)
    np.testing.assert_allclose(real_rows(batch)["rewards"], want)
    _, batch, _ = run_jit(pipeline(add_columns(), clip_rewards(sign=True)), SPACES, eps)
    want = np.sign(np.concatenate([ep.get_rewards() for ep in eps]))
    np.testing.assert_allclose(real_rows(batch)["rewards"], want)


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize("lengths,S", [((7, 3, 10), 4), ((1, 1, 1), 4), ((7, 3, 10), 1)],
                         ids=["mixed", "all-length-1", "max_seq_len-1"])
def test_add_time_dim_and_states_reference(jit, lengths, S):
    """Also where a timestep column and a per-sequence one have the same number of rows
    (episodes of one step, or sequences of one step): `state_in` stays one per sequence."""
    rng = np.random.default_rng(9)
    eps = []
    for i, T in enumerate(lengths):
        L = i % 2
        eps.append(Episode(observations=rng.normal(size=(T + L + 1, 3)).astype(np.float32),
                           actions=rng.integers(0, 3, T + L),
                           rewards=rng.normal(size=T + L).astype(np.float32),
                           extra_model_outputs={"state_out": rng.normal(
                               size=(T + L, 2)).astype(np.float32)},
                           len_lookback_buffer=L, t_started=3 * L, observation_space=OBS,
                           action_space=ACT))
    init = {"h": np.full(2, 0.5, np.float32)}
    eps = [ep.replace(extra_model_outputs={"state_out": {"h": ep.extra_model_outputs[
        "state_out"]}}) for ep in eps]
    _, batch, _ = run_jit(default_learner(SPACES, max_seq_len=S, initial_state=init), SPACES,
                          eps, jit=jit)
    T_pad = EpisodeBatch.from_episodes(eps).max_len
    K = -(-T_pad // S)
    assert batch["obs"].shape == (3 * K, S, 3) and batch["seq_lens"].shape == (3 * K,)
    assert batch["state_in"]["h"].shape == (3 * K, 2)
    for b, ep in enumerate(eps):  # RLlib: split each episode into max_seq_len chunks
        T = len(ep)
        # RLlib: concat([initial if t_started == 0 else the lookback's last state_out],
        # state_outs[:-1])[::max_seq_len]
        outs = ep.get_extra_model_outputs("state_out")["h"]
        first = init["h"] if ep.t_started == 0 else ep.get_extra_model_outputs(
            "state_out", -1, neg_index_as_lookback=True)["h"]
        rllib_states = np.concatenate([first[None], outs[:-1]])[::S]
        for k in range(K):
            row = b * K + k
            n = int(np.clip(T - k * S, 0, S))
            assert int(batch["seq_lens"][row]) == n
            np.testing.assert_array_equal(batch["loss_mask"][row], np.arange(S) < n)
            if n:
                np.testing.assert_allclose(batch["obs"][row][:n],
                                           ep.get_observations(slice(k * S, k * S + n)))
                np.testing.assert_allclose(batch["actions"][row][:n],
                                           ep.get_actions(slice(k * S, k * S + n)))
            np.testing.assert_allclose(batch["obs"][row][n:], 0)
            want = rllib_states[k] if n else init["h"]
            np.testing.assert_allclose(batch["state_in"]["h"][row], want)


def test_stateful_learner_without_recorded_states_starts_every_sequence_initial():
    """Expert data has no state_out: every sequence starts from the module's initial state
    (RLlib would raise KeyError); without an initial state the error says what to pass."""
    eps = random_episodes(n=3, seed=12, lookback=False)
    init = {"h": np.full(5, 0.25, np.float32), "c": np.zeros(5, np.float32)}
    _, batch, _ = run_jit(default_learner(SPACES, max_seq_len=3, initial_state=init), SPACES,
                          eps)
    n = batch["seq_lens"].shape[0]
    np.testing.assert_allclose(batch["state_in"]["h"], np.full((n, 5), 0.25))
    assert batch["state_in"]["c"].shape == (n, 5)
    with pytest.raises(ValueError, match="initial_state"):
        run_jit(default_learner(SPACES, max_seq_len=3), SPACES, eps)


def test_count_based_intrinsic_reward_matches_the_guide():
    rng = np.random.default_rng(10)
    box = OBS.__class__(-10, 10, (2,), np.float32)
    eps = [Episode(observations=rng.integers(0, 3, size=(T + 1, 2)).astype(np.float32),
                   actions=np.zeros(T, int), rewards=np.ones(T, np.float32),
                   observation_space=box, action_space=ACT) for T in (6, 9, 4)]
    spaces = Spaces.of(box, ACT)
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
        np.testing.assert_allclose(real_rows(batch)["rewards"], want, rtol=1e-6)


def _numpy_buckets(obs, table_size):
    """The documented hash, word by word in numpy (uint32 arithmetic wraps as in XLA)."""
    def mix(h):
        h = (h ^ (h >> np.uint32(16))) * np.uint32(0x85EBCA6B)
        h = (h ^ (h >> np.uint32(13))) * np.uint32(0xC2B2AE35)
        return h ^ (h >> np.uint32(16))

    words = np.ascontiguousarray(obs, np.float32).view(np.uint32).reshape(*obs.shape[:2], -1)
    h = np.full(words.shape[:2], 2166136261, np.uint32)
    with np.errstate(over="ignore"):
        for i in range(words.shape[-1]):
            h = mix(h ^ (mix(words[..., i]) + np.uint32(i)))
    return (h % np.uint32(table_size)).astype(np.int32)


def test_count_based_reward_at_1024_dims_compiles_quickly_with_the_same_hashes():
    """The hash is a scan over the observation's words: compiling at 1024 dims takes about as
    long as at 4 (an unrolled loop took ~70 s), and the buckets are the documented ones."""
    import time

    from rljax_offline.connectors.learner import observation_buckets

    rng = np.random.default_rng(11)
    obs = rng.normal(size=(2, 3, 1024)).astype(np.float32)
    np.testing.assert_array_equal(observation_buckets(obs, 1 << 16), _numpy_buckets(obs, 1 << 16))
    box = OBS.__class__(-10, 10, (1024,), np.float32)
    base = rng.integers(0, 2, size=(4, 1024)).astype(np.float32)
    eps = [Episode(observations=base[rng.integers(0, 4, T + 1)], actions=np.zeros(T, int),
                   rewards=np.zeros(T, np.float32), observation_space=box, action_space=ACT)
           for T in (5, 7)]
    spaces = Spaces.of(box, ACT)
    pipe = pipeline(count_based_intrinsic_reward(), add_observations(as_learner_connector=True),
                    add_columns())
    start = time.perf_counter()
    _, batch, _ = run_jit(pipe, spaces, eps)
    jax.block_until_ready(batch)
    assert time.perf_counter() - start < 10.0  # generous for a 2-core CI machine
    counts, want = Counter(), []
    for ep in eps:
        for o in ep.get_observations(slice(None, -1)):
            counts[o.tobytes()] += 1
            want.append(1 / counts[o.tobytes()])
    np.testing.assert_allclose(real_rows(batch)["rewards"], want, rtol=1e-6)


def test_compact_rows_are_rllibs_layout_with_rllibs_dtypes():
    """Valid timesteps only, in episode then time order; Discrete actions int64, flags bool;
    inside jit a static `size` gives the same rows first, then masked zero rows."""
    from rljax_offline.connectors import compact_rows

    eps = random_episodes(seed=15)
    _, batch, _ = run_jit(default_learner(SPACES), SPACES, eps)
    rows = compact_rows(batch, action_space=ACT)
    ref = learner_reference(eps)
    n = sum(len(ep) for ep in eps)
    assert rows["obs"].shape == (n, 3) and rows["loss_mask"].all()
    np.testing.assert_allclose(rows["obs"], ref["obs"])
    np.testing.assert_array_equal(rows["actions"], ref["actions"])
    assert rows["actions"].dtype == np.int64 and rows["terminateds"].dtype == bool
    assert rows["rewards"].dtype == np.float32
    jitted = jax.jit(compact_rows, static_argnums=1)(batch, n + 3)
    np.testing.assert_allclose(jitted["obs"][:n], ref["obs"])
    assert not np.asarray(jitted["loss_mask"][n:]).any() and not np.any(jitted["obs"][n:])
    _, seqs, _ = run_jit(default_learner(SPACES, max_seq_len=4, initial_state={
        "h": np.zeros(2, np.float32)}), SPACES, eps)
    packed = compact_rows(seqs, action_space=ACT)  # RLlib: ceil(len / max_seq_len) per episode
    assert len(packed["seq_lens"]) == sum(-(-len(ep) // 4) for ep in eps)
    assert packed["state_in"]["h"].shape[0] == len(packed["seq_lens"])
    np.testing.assert_array_equal(packed["loss_mask"].sum(1), packed["seq_lens"])
    assert packed["seq_lens"].dtype == np.int32 and packed["actions"].dtype == np.int64
    with pytest.raises(ValueError, match="recurrent"):
        compact_rows(seqs, size=8)


def test_add_states_names_a_state_structure_mismatch():
    eps = [ep.replace(extra_model_outputs={"state_out": np.zeros((len(ep), 2), np.float32)})
           for ep in random_episodes(n=2, seed=16, lookback=False)]
    pipe = default_learner(SPACES, max_seq_len=4, initial_state={"h": np.zeros(2), "c":
                                                                 np.zeros(2)})
    with pytest.raises(ValueError, match="structure"):
        run_jit(pipe, SPACES, eps)


@pytest.mark.parametrize("jit", [True, False])
def test_next_state_in_is_rllibs_state_out_at_each_sequence_start(jit):
    """RLlib's `AddStatesFromEpisodesToBatch` with `new_obs` in the batch: `next_state_in`
    per sequence is `state_outs[::max_seq_len]`; an episode without `state_out` gets the
    initial state (zeros), as do the all-padding sequences static shapes add."""
    S = 3
    rng = np.random.default_rng(21)
    eps = random_episodes(n=4, seed=21, lookback=False, min_len=2)
    with_state = [ep.replace(extra_model_outputs={
        **ep.extra_model_outputs,
        "state_out": {"h": rng.normal(size=(len(ep), 2)).astype(np.float32)}})
        for ep in eps]
    init = {"h": np.zeros(2, np.float32)}
    pipe = default_learner(SPACES, max_seq_len=S, initial_state=init)
    _, batch, _ = run_jit(pipe, SPACES, with_state, jit=jit)
    K = -(-max(len(ep) for ep in eps) // S)
    want = np.zeros((len(eps) * K, 2), np.float32)
    for i, ep in enumerate(with_state):
        outs = ep.extra_model_outputs["state_out"]["h"][::S]  # RLlib: state_outs[::T]
        want[i * K:i * K + len(outs)] = outs
    assert batch["next_state_in"]["h"].shape == (len(eps) * K, 2)
    np.testing.assert_array_equal(batch["next_state_in"]["h"], want)
    # state_in (RLlib: concat([initial], state_outs[:-1])[::T]) is the step before
    for i, ep in enumerate(with_state):
        outs = np.concatenate([np.zeros((1, 2), np.float32),
                               ep.extra_model_outputs["state_out"]["h"][:-1]])[::S]
        np.testing.assert_array_equal(batch["state_in"]["h"][i * K:i * K + len(outs)], outs)
    _, plain, _ = run_jit(pipe, SPACES, eps, jit=jit)
    np.testing.assert_array_equal(plain["next_state_in"]["h"], 0.0)
    assert plain["next_state_in"]["h"].shape == (len(eps) * K, 2)
    # without new_obs (a custom pipeline) there is no next_state_in, as in RLlib
    from rljax_offline.connectors import add_states

    bare = pipeline(add_observations(as_learner_connector=True), add_columns(),
                    add_states(S, initial_state=init))
    _, no_next, _ = run_jit(bare, SPACES, with_state, jit=jit)
    assert "next_state_in" not in no_next and "state_in" in no_next
