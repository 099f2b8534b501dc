"""Property tests: Episode/EpisodeBuilder getters against a plain-Python model of RLlib's
`InfiniteLookbackBuffer.get` rules (lookback, negative indices, fill, slices).

The model below is written from RLlib's documented rules, on Python lists, independently of
`rljax_offline.episode.lookback`. RLlib leaves one case undefined (a slice that needs fill on both
sides at once, which trips an assertion there); we fill both sides, and the model does too.
"""

import jax
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rljax_offline import Episode, EpisodeBuilder

FILL = -99.0


def model_int(data, lookback, idx, neg_as_lb, fill):
    n = len(data)
    pos = lookback + idx if (idx >= 0 or neg_as_lb) else n + idx
    if 0 <= pos < n:
        return data[pos]
    if fill is None:
        raise IndexError
    return fill


def model_slice(data, lookback, s, neg_as_lb, fill):
    n = len(data)

    def resolve(b, default):
        if b is None:
            return default
        if b < 0 and not neg_as_lb:
            return n + b
        return lookback + b

    start, stop = resolve(s.start, lookback), resolve(s.stop, n)
    step = s.step or 1
    out = []
    for pos in range(start, stop, step):
        if 0 <= pos < n:
            out.append(data[pos])
        elif fill is not None:
            out.append(fill)
    return out


def model_get(data, lookback, indices, neg_as_lb, fill):
    if indices is None:
        return data[lookback:]
    if isinstance(indices, int):
        return model_int(data, lookback, indices, neg_as_lb, fill)
    if isinstance(indices, list):
        return [model_int(data, lookback, i, neg_as_lb, fill) for i in indices]
    return model_slice(data, lookback, indices, neg_as_lb, fill)


small = st.integers(-12, 12)
indices_st = st.one_of(
    st.none(),
    small,
    st.lists(small, min_size=0, max_size=5),
    st.builds(slice, st.one_of(st.none(), small), st.one_of(st.none(), small),
              st.one_of(st.none(), st.integers(1, 3))),
)


@st.composite
def episodes(draw):
    T = draw(st.integers(0, 8))
    L = draw(st.integers(0, T))
    n_act = T
    obs = [float(i * 10) for i in range(n_act + 1)]
    acts = list(range(100, 100 + n_act))
    rews = [float(i) + 0.5 for i in range(n_act)]
    return Episode(observations=obs, actions=acts, rewards=rews, len_lookback_buffer=L)


def compare(getter, data, lookback, indices, neg, fill):
    try:
        expected = model_get(data, lookback, indices, neg, fill)
    except IndexError:
        try:
            getter(indices, neg_index_as_lookback=neg, fill=fill)
        except IndexError:
            return
        raise AssertionError(f"expected IndexError for {indices}") from None
    got = getter(indices, neg_index_as_lookback=neg, fill=fill)
    if isinstance(expected, list):
        assert np.asarray(got).shape[0] == len(expected), (indices, got, expected)
        np.testing.assert_array_equal(np.asarray(got, np.float64).reshape(-1),
                                      np.asarray(expected, np.float64).reshape(-1))
    else:
        assert np.ndim(got) == 0, "a single index returns one item, not a batch"
        assert float(got) == float(expected)


@settings(max_examples=300, deadline=None)
@given(episodes(), indices_st, st.booleans(), st.sampled_from([None, FILL]))
def test_episode_getters_match_rllib_model(ep, indices, neg, fill):
    obs = list(np.asarray(ep.observations))
    compare(ep.get_observations, obs, ep.len_lookback_buffer, indices, neg, fill)
    compare(ep.get_actions, list(np.asarray(ep.actions)), ep.len_lookback_buffer, indices,
            neg, fill)
    compare(ep.get_rewards, list(np.asarray(ep.rewards)), ep.len_lookback_buffer, indices,
            neg, fill)


@settings(max_examples=150, deadline=None)
@given(episodes(), indices_st, st.booleans(), st.sampled_from([None, FILL]))
def test_builder_getters_match_episode(ep, indices, neg, fill):
    b = EpisodeBuilder(observations=list(np.asarray(ep.observations)),
                       actions=list(np.asarray(ep.actions)),
                       rewards=list(np.asarray(ep.rewards)),
                       len_lookback_buffer=ep.len_lookback_buffer)
    for getter_b, getter_e in ((b.get_observations, ep.get_observations),
                               (b.get_rewards, ep.get_rewards)):
        try:
            want = getter_e(indices, neg_index_as_lookback=neg, fill=fill)
        except IndexError:
            try:
                getter_b(indices, neg_index_as_lookback=neg, fill=fill)
            except IndexError:
                continue
            raise AssertionError("builder did not raise") from None
        got = getter_b(indices, neg_index_as_lookback=neg, fill=fill)
        np.testing.assert_array_equal(np.asarray(got).reshape(-1), np.asarray(want).reshape(-1))


@settings(max_examples=60, deadline=None)
@given(episodes(), indices_st, st.booleans())
def test_getters_under_jit_equal_eager(ep, indices, neg):
    try:
        eager = ep.get_observations(indices, neg_index_as_lookback=neg, fill=FILL)
    except IndexError:
        return
    jitted = jax.jit(lambda e: e.get_observations(indices, neg_index_as_lookback=neg,
                                                  fill=FILL))(ep)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager))


@settings(max_examples=100, deadline=None)
@given(episodes(), st.integers(-10, 10), st.one_of(st.none(), st.integers(-10, 10)),
       st.integers(0, 4))
def test_slice_is_a_consistent_chunk(ep, a, b, want_lb):
    chunk = ep.slice(slice(a, b), len_lookback_buffer=want_lb)
    n = len(ep)
    start = max(n + a, 0) if a < 0 else min(a, n)
    stop = n if b is None else (max(n + b, 0) if b < 0 else min(b, n))
    stop = max(stop, start)
    assert len(chunk) == stop - start
    assert chunk.t_started == ep.t_started + start
    assert chunk.len_lookback_buffer <= want_lb
    np.testing.assert_array_equal(chunk.get_rewards(), ep.get_rewards()[start:stop])
    np.testing.assert_array_equal(chunk.get_observations(), ep.get_observations()[start:stop + 1])
    # The chunk's lookback is the steps right before it.
    k = chunk.len_lookback_buffer
    if k:
        np.testing.assert_array_equal(
            chunk.get_rewards(slice(-k, 0), neg_index_as_lookback=True),
            ep.get_rewards(slice(start - k, start), neg_index_as_lookback=True))
