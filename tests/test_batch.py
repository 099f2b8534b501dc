"""EpisodeBatch: padding, masks, lookback alignment, round trips and bucketed compilation."""

import math

import chex
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rljax_offline import Episode, EpisodeBatch, EpisodeError, bucket_length


def episode(T, lookback=0, seed=0, dict_obs=False):
    rng = np.random.default_rng(seed)
    n = T + lookback
    obs = rng.normal(size=(n + 1, 3)).astype(np.float32)
    if dict_obs:
        obs = {"x": obs, "k": rng.integers(0, 5, size=n + 1)}
    return Episode(observations=obs, actions=rng.integers(0, 2, size=n).astype(np.int32),
                   rewards=rng.normal(size=n).astype(np.float32),
                   extra_model_outputs={"logp": rng.normal(size=n).astype(np.float32)},
                   terminated=bool(seed % 2), len_lookback_buffer=lookback,
                   t_started=lookback, action_space=gym.spaces.Discrete(2))


def test_layout_masks_and_alignment():
    eps = [episode(5, 2, seed=1), episode(3, 0, seed=2), episode(9, 1, seed=3)]
    b = EpisodeBatch.from_episodes(eps)
    assert b.max_len == 16 and b.len_lookback_buffer == 2 and b.batch_size == 3
    assert b.observations.shape == (3, 2 + 16 + 1, 3)
    assert b.actions.shape == (3, 18) and b.extra_model_outputs["logp"].shape == (3, 18)
    np.testing.assert_array_equal(b.lengths, [5, 3, 9])
    np.testing.assert_array_equal(b.lookback_lengths, [2, 0, 1])
    np.testing.assert_array_equal(b.mask.sum(1), [5, 3, 9])
    for i, ep in enumerate(eps):
        L = b.len_lookback_buffer
        np.testing.assert_array_equal(b.observations[i, L:L + len(ep) + 1], ep.get_observations())
        np.testing.assert_array_equal(b.rewards[i, L:L + len(ep)], ep.get_rewards())
        k = ep.len_lookback_buffer
        if k:
            np.testing.assert_array_equal(b.rewards[i, L - k:L],
                                          ep.get_rewards(slice(-k, 0), neg_index_as_lookback=True))
    # Everything outside the masks is padding.
    assert np.all(b.rewards[~b.lookback_mask] == 0)
    assert np.all(b.observations[~b.obs_mask] == 0)
    assert b.obs_mask.sum() == sum(len(e) + 1 + e.len_lookback_buffer for e in eps)
    np.testing.assert_array_equal(b.terminated, [e.terminated for e in eps])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 3)), min_size=1, max_size=5),
       st.booleans())
def test_round_trip_gives_equal_episodes(specs, dict_obs):
    eps = [episode(T, min(lb, T), seed=i, dict_obs=dict_obs) for i, (T, lb) in enumerate(specs)]
    b = EpisodeBatch.from_episodes(eps, pad_batch_to=len(eps) + 1)
    back = b.to_episodes()
    assert len(back) == len(eps)
    for a, e in zip(back, eps):
        chex.assert_trees_all_equal(a, e)


def expected_column(items, lookback, keep, L, width, pad_value):
    """The layout by definition, one column at a time: column `c` holds the episode's item
    `c - L + lookback` (its step `c - L`) when that item exists and is one of the `keep`
    newest lookback items or a step; padding everywhere else."""
    out = np.full((width, *items.shape[1:]), pad_value, items.dtype)
    for c in range(width):
        k = c - L + lookback
        if lookback - keep <= k < len(items):
            out[c] = items[k]
    return out


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 4)), min_size=1, max_size=5),
       st.booleans(), st.sampled_from([None, 0, 1, 2]), st.integers(0, 3),
       st.sampled_from([0, -7.5]), st.sampled_from(["pow2", None]))
def test_padded_layout_matches_its_definition(specs, dict_obs, lookback_cap, extra_rows,
                                              pad_value, bucket):
    """Every leaf of every episode lands where the layout says (lookback cut to
    `len_lookback_buffer`, any `pad_value`, `pad_batch_to`, Dict observations); the rest is
    padding, and the per-episode fields line up."""
    eps = [episode(T, min(lb, T), seed=i, dict_obs=dict_obs) for i, (T, lb) in enumerate(specs)]
    b = EpisodeBatch.from_episodes(eps, len_lookback_buffer=lookback_cap, bucket=bucket,
                                   pad_batch_to=len(eps) + extra_rows, pad_value=pad_value)
    L, T = b.len_lookback_buffer, b.max_len
    assert L == (max(e.len_lookback_buffer for e in eps) if lookback_cap is None
                 else lookback_cap)
    assert b.batch_size == len(eps) + extra_rows
    for i, ep in enumerate(eps):
        keep = min(ep.len_lookback_buffer, L)
        assert b.lookback_lengths[i] == keep and b.lengths[i] == len(ep)
        pairs = [(ep.observations, b.observations, 1), (ep.actions, b.actions, 0),
                 (ep.rewards, b.rewards, 0),
                 (ep.extra_model_outputs, b.extra_model_outputs, 0)]
        for src, got, extra in pairs:
            for s, g in zip(jax.tree_util.tree_leaves(src), jax.tree_util.tree_leaves(got)):
                want = expected_column(np.asarray(s), ep.len_lookback_buffer, keep, L,
                                       L + T + extra, pad_value)
                np.testing.assert_array_equal(g[i], want)
                assert g.dtype == np.asarray(s).dtype
    for leaf in jax.tree_util.tree_leaves((b.observations, b.actions, b.rewards,
                                           b.extra_model_outputs)):
        assert np.all(leaf[len(eps):] == np.asarray(pad_value).astype(leaf.dtype))  # empty rows
    assert not b.lengths[len(eps):].any() and not b.terminated[len(eps):].any()
    np.testing.assert_array_equal(b.terminated[:len(eps)], [e.terminated for e in eps])
    np.testing.assert_array_equal(b.t_started[:len(eps)], [e.t_started for e in eps])
    assert b.meta.ids == tuple(e.id_ for e in eps)


def test_meta_is_dropped_by_transforms_and_can_be_given_back():
    eps = [episode(4, seed=1), episode(6, seed=2)]
    b = EpisodeBatch.from_episodes(eps)
    doubled = jax.jit(lambda x: jax.tree_util.tree_map(lambda y: y * 1, x))(b)
    with pytest.raises(EpisodeError, match="to_episodes\\(meta="):
        doubled.to_episodes()
    back = doubled.to_episodes(meta=b.meta)
    assert [e.id_ for e in back] == [e.id_ for e in eps]


def test_bucketing_limits_compilations():
    traces = []

    @jax.jit
    def masked_return(b):
        traces.append(b.max_len)
        return jnp.sum(jnp.where(b.mask, b.steps(b.rewards), 0.0), axis=1)

    rng = np.random.default_rng(0)
    longest = 500
    lengths = rng.integers(1, longest + 1, size=60)
    for i in range(0, 60, 3):
        eps = [episode(int(t), seed=j) for j, t in enumerate(lengths[i:i + 3])]
        out = masked_return(EpisodeBatch.from_episodes(eps))
        np.testing.assert_allclose(out, [e.get_return() for e in eps], rtol=1e-4, atol=1e-4)
    assert len(traces) <= math.ceil(math.log2(longest)), traces
    assert len(set(traces)) == len(traces)


def test_padding_never_leaks_into_masked_sums():
    eps = [episode(3, 1, seed=1), episode(7, 0, seed=2)]
    b = EpisodeBatch.from_episodes(eps)
    noisy = b.replace(rewards=np.where(b.lookback_mask, b.rewards, 1e6).astype(np.float32))
    f = jax.jit(lambda x: jnp.sum(jnp.where(x.mask, x.steps(x.rewards), 0.0)))
    assert float(f(b)) == pytest.approx(float(f(noisy)))


def test_bucket_length():
    assert [bucket_length(n) for n in (0, 1, 8, 9, 500, 512, 513)] == [8, 8, 8, 16, 512, 512, 1024]
    assert bucket_length(13, bucket=None) == 13


def test_errors():
    with pytest.raises(EpisodeError, match="at least one"):
        EpisodeBatch.from_episodes([])
    with pytest.raises(EpisodeError, match="max_len=4 is shorter"):
        EpisodeBatch.from_episodes([episode(6)], max_len=4)
    with pytest.raises(EpisodeError, match="different structure"):
        EpisodeBatch.from_episodes([episode(3), episode(3, dict_obs=True)])
    with pytest.raises(EpisodeError, match="not an Episode"):
        EpisodeBatch.from_episodes([{"obs": 1}])
    odd = Episode(observations=np.zeros((3, 5), np.float32), actions=np.zeros(2, np.int32),
                  rewards=np.zeros(2, np.float32), extra_model_outputs={"logp": np.zeros(2,
                                                                                      np.float32)},
                  action_space=gym.spaces.Discrete(2))
    with pytest.raises(EpisodeError, match=rf"episode 1 \({odd.id_!r}\) has items of shape "
                       r"\(5,\) where episode 0 has \(3,\)"):
        EpisodeBatch.from_episodes([episode(2), odd])
    with pytest.raises(EpisodeError, match="episode 1 .* no observations"):
        EpisodeBatch.from_episodes([episode(2), Episode()])


def test_batches_of_episodes_without_host_data():
    """Episodes that came out of a JAX transform (no ids / infos) still batch and unbatch."""
    import jax
    import numpy as np

    from rljax_offline import Episode, EpisodeBatch

    ep = Episode(observations=np.zeros((4, 2), np.float32), actions=np.zeros(3, np.int64),
                 rewards=np.ones(3, np.float32))
    moved = jax.device_put(ep)
    assert not moved.has_host_data
    back = EpisodeBatch.from_episodes([moved, ep]).to_episodes()
    assert len(back[0]) == 3 and back[1].id_ == ep.id_
