"""The OPE estimators' maths (`rljax_offline.ope.estimators`) against hand-computed values on
tiny synthetic episodes: on-policy data, known weights, DR with an exact Q, the bootstrap
interval and the effective sample size. Numpy only: no model, no compile."""

import math

import numpy as np
import pytest

from rljax_offline.ope.data import pad
from rljax_offline.ope.estimators import (
    EpisodeArrays,
    contributions,
    effective_sample_size,
    summarize,
)


def arrays(rewards, logp_b, logp_t, q=None, v=None):
    """Episodes given as lists of per-step lists."""
    lengths = [len(r) for r in rewards]
    flat = lambda xs: np.concatenate([np.asarray(x, float) for x in xs])  # noqa: E731
    zeros = np.zeros(sum(lengths))
    return EpisodeArrays(pad(flat(rewards), lengths), pad(np.ones(sum(lengths)), lengths),
                         pad(flat(logp_b), lengths), pad(flat(logp_t), lengths),
                         pad(zeros if q is None else flat(q), lengths),
                         pad(zeros if v is None else flat(v), lengths))


def value(name, ep, gamma, **kw):
    return float(contributions(name, ep, gamma, np.ones((1, ep.num_episodes)), **kw).sum())


def test_on_policy_every_weighted_estimator_is_the_behaviour_value():
    rng = np.random.default_rng(0)
    lengths = [3, 7, 1, 5]
    rewards = [rng.uniform(0.0, 1.0, n) for n in lengths]
    logp = [np.log(rng.uniform(0.1, 1.0, n)) for n in lengths]
    ep = arrays(rewards, logp, logp)
    gamma = 0.9
    behavior = np.mean([np.sum(r * gamma ** np.arange(len(r))) for r in rewards])
    for name in ("is", "wis", "pdis", "wpdis"):
        assert value(name, ep, gamma) == pytest.approx(behavior, rel=1e-12), name
    out = summarize("wis", ep, gamma, num_bootstrap=50)
    assert out["v_target"] == pytest.approx(out["v_behavior"], rel=1e-12)
    assert out["v_gain"] == pytest.approx(1.0) and out["v_delta"] == pytest.approx(0.0, abs=1e-12)
    assert out["ess"] == pytest.approx(4.0)


def test_known_weights_by_hand():
    # Two 2-step episodes; per-step ratios (2, 0.5) and (1, 3); gamma 0.5.
    rewards = [[1.0, 2.0], [3.0, 4.0]]
    logp_b = [[0.0, 0.0], [0.0, 0.0]]
    logp_t = [[math.log(2), math.log(0.5)], [0.0, math.log(3)]]
    ep = arrays(rewards, logp_b, logp_t)
    g = 0.5
    G = [1 + g * 2, 3 + g * 4]           # discounted returns 2 and 5
    W = [2 * 0.5, 1 * 3]                 # trajectory weights 1 and 3
    assert value("is", ep, g) == pytest.approx((W[0] * G[0] + W[1] * G[1]) / 2)
    assert value("wis", ep, g) == pytest.approx((W[0] * G[0] + W[1] * G[1]) / (W[0] + W[1]))
    # per decision: w_0 = (2, 1), w_1 = (1, 3)
    pdis = (2 * 1 + 1 * 3) / 2 + g * (1 * 2 + 3 * 4) / 2
    wpdis = (2 * 1 + 1 * 3) / 3 + g * (1 * 2 + 3 * 4) / 4
    assert value("pdis", ep, g) == pytest.approx(pdis)
    assert value("wpdis", ep, g) == pytest.approx(wpdis)
    # an episode that ended keeps its last weight in the weighted normaliser
    ep2 = arrays([[1.0], [3.0, 4.0]], [[0.0], [0.0, 0.0]], [[math.log(2)], [0.0, math.log(3)]])
    assert value("wpdis", ep2, g) == pytest.approx((2 * 1 + 1 * 3) / 3 + g * (3 * 4) / (2 + 3))


def test_doubly_robust_with_an_exact_q_is_the_direct_method_whatever_the_weights():
    # A deterministic chain: Q(s_t, a_t) = r_t + g V(s_{t+1}) exactly, so every correction
    # term vanishes and DR (ordinary and weighted) returns mean V(s_0).
    g = 0.8
    rewards = [[1.0, 2.0, 0.5], [0.0, 1.0]]
    v = [[4.0, 3.0, 1.5], [2.0, 1.2]]
    q = [[r + g * vn for r, vn in zip(rs, vs[1:] + [0.0])] for rs, vs in zip(rewards, v)]
    logp_b = [[-0.3, -1.0, -0.2], [-0.7, -0.1]]
    logp_t = [[-1.2, -0.1, -2.0], [-0.05, -1.5]]
    ep = arrays(rewards, logp_b, logp_t, q, v)
    dm = (4.0 + 2.0) / 2
    assert value("dm", ep, g) == pytest.approx(dm)
    assert value("dr", ep, g, weighted_dr=False) == pytest.approx(dm, rel=1e-12)
    assert value("dr", ep, g, weighted_dr=True) == pytest.approx(dm, rel=1e-12)
    # any Q with Q(s, a) = V(s) (one action) and on-policy weights: every model term
    # cancels and DR, ordinary or weighted, is the behaviour value
    wrong = [[0.3, 1.7, -2.0], [0.1, 5.0]]
    ep_on = arrays(rewards, logp_b, logp_b, wrong, wrong)
    behavior = np.mean([sum(r * g**t for t, r in enumerate(rs)) for rs in rewards])
    assert value("dr", ep_on, g, weighted_dr=False) == pytest.approx(behavior, rel=1e-12)
    assert value("dr", ep_on, g, weighted_dr=True) == pytest.approx(behavior, rel=1e-12)
    # no weight survives (a greedy target off every recorded action): weighted DR is the
    # direct method, WIS has nothing to stand on
    never = [[-np.inf] * 3, [-np.inf] * 2]
    ep_off = arrays(rewards, logp_b, never, wrong, [[4.0, 1.0, 1.0], [2.0, 1.0]])
    assert value("dr", ep_off, g, weighted_dr=True) == pytest.approx(3.0)
    with np.errstate(invalid="ignore"):
        assert np.isnan(value("wis", ep_off, g))


def test_bootstrap_interval_matches_the_normal_interval_of_a_mean():
    rng = np.random.default_rng(1)
    E = 400
    rewards = [[x] for x in rng.normal(2.0, 1.0, E)]
    zeros = [[0.0]] * E
    out = summarize("is", arrays(rewards, zeros, zeros), 0.9, num_bootstrap=2000, seed=3)
    lo, hi = out["v_target_ci"]
    half = 1.96 * out["v_target_std"] / math.sqrt(E)
    assert lo < out["v_target"] < hi
    assert (hi - lo) / 2 == pytest.approx(half, rel=0.1)
    assert (lo + hi) / 2 == pytest.approx(out["v_target"], abs=0.2 * half)


def test_effective_sample_size_and_no_clipping():
    zeros = [[0.0]] * 4
    r = [[1.0], [2.0], [3.0], [4.0]]
    assert effective_sample_size(arrays(r, zeros, zeros)) == pytest.approx(4.0)
    one = [[0.0], [-np.inf], [-np.inf], [-np.inf]]
    assert effective_sample_size(arrays(r, zeros, one)) == pytest.approx(1.0)
    none = [[-np.inf]] * 4
    assert effective_sample_size(arrays(r, zeros, none)) == 0.0
    # w = (1, 2, 3, 4): ESS = 100 / 30
    logs = [[math.log(k)] for k in (1, 2, 3, 4)]
    assert effective_sample_size(arrays(r, zeros, logs)) == pytest.approx(100 / 30)
    # huge weights: the weighted estimators stay exact (no overflow, no clipping)
    big = [[800.0], [801.0], [0.0], [0.0]]
    e = math.exp(1.0)
    assert value("wis", arrays(r, zeros, big), 0.9) == pytest.approx((1 + 2 * e) / (1 + e))


def two_heads(num_episodes: int = 8):
    """One-step episodes of reward 0 and V(s_0) = Q(s_0, a_0) = 0 under head 0 and 10 under
    head 1: each head's DM estimate is exact whatever the episode resample."""
    zeros = [[0.0]] * num_episodes
    ep = arrays(zeros, zeros, zeros)
    v = np.stack([np.zeros((num_episodes, 1)), np.full((num_episodes, 1), 10.0)])
    return ep, v


def test_bootstrap_heads_carry_the_models_spread_into_the_interval():
    # only the heads make the interval wide
    ep, v = two_heads()
    two = ep._replace(q=v, v=v)
    out = summarize("dm", two, 0.9, num_bootstrap=100, seed=0, uses_weights=False)
    assert out["v_target"] == pytest.approx(5.0)
    assert out["v_target_model_std"] == pytest.approx(5.0)
    assert out["v_target_ci"] == (pytest.approx(0.0), pytest.approx(10.0))
    # DR on one-step episodes with Q(s_0, a_0) = 0, V(s_0) = the head's: r - Q + V = V
    dr_heads = ep._replace(q=np.zeros_like(v), v=v)
    assert summarize("dr", dr_heads, 0.9, num_bootstrap=100)["v_target_ci"] == (
        pytest.approx(0.0), pytest.approx(10.0))
    one = summarize("dm", ep._replace(q=v[1], v=v[1]), 0.9, num_bootstrap=100,
                    uses_weights=False)
    assert one["v_target_ci"] == (pytest.approx(10.0), pytest.approx(10.0))
    assert one["v_target_model_std"] is None


def test_model_error_widens_the_direct_methods_interval_only():
    # DM rests on the model alone: a bound on each head's distance to its fixed point widens
    # its interval (the mean over heads, both sides); DR's corrections absorb model errors
    ep, v = two_heads()
    two = ep._replace(q=v, v=v)
    out = summarize("dm", two, 0.9, num_bootstrap=100, uses_weights=False,
                    model_error=np.array([1.0, 3.0]))
    assert out["v_target_model_error"] == pytest.approx(2.0)
    assert out["v_target_ci_bootstrap"] == (pytest.approx(0.0), pytest.approx(10.0))
    assert out["v_target_ci"] == (pytest.approx(-2.0), pytest.approx(12.0))
    assert out["v_target"] == pytest.approx(5.0)  # the estimate itself is unchanged
    dr = summarize("dr", ep._replace(q=np.zeros_like(v), v=v), 0.9, num_bootstrap=100,
                   model_error=np.array([1.0, 3.0]))
    assert dr["v_target_model_error"] is None
    assert dr["v_target_ci"] == dr["v_target_ci_bootstrap"] == (
        pytest.approx(0.0), pytest.approx(10.0))
