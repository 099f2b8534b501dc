"""Fitted Q evaluation through the learner core (`rljax_offline.ope.fqe`): jitted, every
bootstrap head reaches the exact value of a tiny chain MDP, and 8 (fake) devices give the
one-device fit."""

import gymnasium as gym
import numpy as np
import pytest

from rljax_offline import spaces as sp
from rljax_offline.errors import ConfigError
from rljax_offline.ope.fqe import bootstrap_weights, convergence_bound, fit_fqe, segments
from rljax_offline.ope.methods import FQEOptions, Method, parse_methods
from rljax_offline.ope.run import run
from rljax_offline.ope.target import from_function

GAMMA, P_RIGHT = 0.9, 0.7


def chain_columns(copies: int = 16) -> dict:
    """States 0, 1, 2 (one-hot). In 0 and 1: action 1 moves right (reward 1), action 0 stays
    (reward 0). In 2 both actions end the episode with reward 2. Every (s, a) `copies`
    times; the target policy takes action 1 with probability 0.7 everywhere."""
    eye = np.eye(3, dtype=np.float32)
    obs, act, rew, nxt, term = [], [], [], [], []
    for s in range(3):
        for a in (0, 1):
            obs.append(eye[s])
            act.append(a)
            if s == 2:
                rew.append(2.0), nxt.append(eye[s]), term.append(1.0)
            else:
                rew.append(float(a)), nxt.append(eye[s + a]), term.append(0.0)
    n = len(obs) * copies
    tile = lambda x, dt: np.tile(np.asarray(x, dt), (copies,) + (1,) * (np.ndim(x) - 1))  # noqa: E731
    return {"obs": tile(obs, np.float32), "actions": tile(act, np.int64),
            "rewards": tile(rew, np.float32), "new_obs": tile(nxt, np.float32),
            "terminateds": tile(term, np.float32),
            "next_pi": np.tile(np.float32([1 - P_RIGHT, P_RIGHT]), (n, 1))}


def exact_values() -> np.ndarray:
    v2 = 2.0
    v1 = P_RIGHT * (1 + GAMMA * v2) / (1 - (1 - P_RIGHT) * GAMMA)
    v0 = P_RIGHT * (1 + GAMMA * v1) / (1 - (1 - P_RIGHT) * GAMMA)
    return np.array([v0, v1, v2])


SPECS = (sp.to_spec(gym.spaces.Box(0.0, 1.0, (3,), np.float32)), sp.to_spec(gym.spaces.Discrete(2)))


def test_fqe_under_jit_converges_to_the_exact_value_of_a_chain():
    opts = FQEOptions(num_updates=1500, train_batch_size=96, lr=3e-3, target_update_period=25,
                      model_config={"fcnet_hiddens": [32]}, num_devices=1, update_mode="jit",
                      bootstrap_heads=3)
    fit = fit_fqe(chain_columns(), *SPECS, GAMMA, opts)
    v = fit.v(np.eye(3, dtype=np.float32), np.tile(np.float32([1 - P_RIGHT, P_RIGHT]), (3, 1)))
    assert v.shape == (3, 3)  # [heads, states]: each head on its own resample of the rows
    np.testing.assert_allclose(v, np.tile(exact_values(), (3, 1)), atol=0.03)
    assert fit.metrics["fqe_num_updates"] == 1500 and fit.metrics["fqe_updates_per_s"] > 0


def test_fqe_on_8_devices_equals_1():
    cols = chain_columns()
    fits = [fit_fqe(cols, *SPECS, GAMMA, FQEOptions(
        num_updates=40, train_batch_size=48, lr=3e-3, target_update_period=10,
        model_config={"fcnet_hiddens": [16]}, num_devices=n, update_mode=mode,
        bootstrap_heads=2))
            for n, mode in ((1, "jit"), (8, "shard_map"))]
    obs = cols["obs"][:6]
    q = [f.q_sa(obs, cols["actions"][:6]) for f in fits]
    # the same minibatches and keys; only the order of float sums differs (8 partial sums)
    np.testing.assert_allclose(q[1], q[0], rtol=1e-4, atol=1e-5)
    assert q[0].shape == (2, 6) and not np.allclose(q[0], 0.0)
    assert not np.allclose(q[0][0], q[0][1])  # two heads: own init, own resample


def test_bootstrap_weights_resample_whole_episodes_per_head():
    w = bootstrap_weights([3, 1, 4, 2] * 50, 4, seed=0)
    assert w.shape == (500, 4)
    starts = np.cumsum([0] + [3, 1, 4, 2] * 50)[:-1]
    per_episode = np.split(w, starts[1:])
    assert all((e == e[0]).all() for e in per_episode)  # one count per episode and head
    counts = np.stack([e[0] for e in per_episode])  # [200, 4]
    assert not np.allclose(counts[:, 0], counts[:, 1])  # each head its own resample
    np.testing.assert_allclose(counts.mean(axis=0), 1.0, atol=0.25)  # Poisson(1)
    assert (bootstrap_weights([3, 2], 1, seed=0) == 1.0).all()  # one head: the plain fit


def test_bootstrap_heads_option():
    assert parse_methods({"f": {"type": "fqe"}})["f"].fqe.bootstrap_heads == 1
    assert parse_methods({"d": {"type": "dr", "bootstrap_heads": 3}})["d"].fqe.bootstrap_heads == 3
    with pytest.raises(ConfigError, match=r"\['f'\] \(dm\): bootstrap_heads must be an integer"):
        parse_methods({"f": {"type": "fqe", "bootstrap_heads": 0}})


def test_the_compared_span_is_the_second_half_in_whole_backups():
    assert segments(8000, 100) == ([1000] * 8, 4)
    assert segments(1500, 25) == ([750, 750], 1)  # 750 updates back: 30 backups
    assert segments(1030, 100) == ([530, 500], 1)
    assert segments(250, 100) == ([150, 100], 1)
    assert segments(150, 100) == ([150], 0)  # under two periods: compared with the init
    parts, first = segments(12345, 70)
    assert sum(parts) == 12345 and max(parts) <= 1000 and sum(parts[first:]) == 6160


def test_convergence_bound_is_banachs_a_posteriori_bound():
    # x_k = gamma^k x_0 (the error of a gamma-contraction's iterates): the bound from the
    # change over the last m steps is exactly the remaining distance to the fixed point 0
    gamma, x0, k, m = 0.9, 7.0, 30, 10
    change = x0 * gamma ** (k - m) - x0 * gamma ** k
    assert convergence_bound(np.array([change]), gamma, m)[0] == pytest.approx(x0 * gamma**k)
    assert np.isinf(convergence_bound(np.array([0.5]), gamma, 0.0)[0])


def test_an_early_stopped_fqe_interval_covers_the_exact_value_through_its_bound():
    # 4 backups of a chain whose values need ~40: the bootstrap interval alone is far off
    # (every resample shares the truncation), the convergence bound widens DM's interval
    # over the exact value; a fit run to its fixed point keeps a tight interval
    cols = chain_columns(copies=4)
    n = len(cols["rewards"])
    target = from_function(lambda obs: np.tile([1 - P_RIGHT, P_RIGHT], (len(obs), 1)),
                           gym.spaces.Discrete(2))
    exact = float(np.mean(exact_values()))  # every row is its own one-step "episode"
    out = {}
    for updates in (100, 1500):  # compared over the last 2 and 30 backups
        opts = FQEOptions(num_updates=updates, train_batch_size=96, lr=3e-3,
                          target_update_period=25, model_config={"fcnet_hiddens": [32]},
                          num_devices=1, update_mode="jit")
        cols_run = {k: v for k, v in cols.items() if k != "next_pi"}
        out[updates] = run({"dm": Method("dm", fqe=opts)}, cols_run, [1] * n, target,
                           SPECS[0], SPECS[1], GAMMA, num_bootstrap=50)["dm"]
    early, done = out[100], out[1500]
    assert early["fqe_backups_compared"] == 2.0 and done["fqe_backups_compared"] == 30.0
    lo, hi = early["v_target_ci_bootstrap"]
    assert not lo <= exact <= hi  # the sampling interval misses the truncation bias
    assert early["v_target_ci"][0] <= exact <= early["v_target_ci"][1]
    assert early["v_target_model_error"] == pytest.approx(early["fqe_convergence_bound"])
    assert abs(done["v_target"] - exact) < 0.05
    assert done["v_target_model_error"] < early["v_target_model_error"] / 4
    assert done["v_target_ci"][0] <= exact <= done["v_target_ci"][1]


def test_the_compared_iterate_is_the_fit_at_its_middle():
    # 2050 updates run as [1000, 25, 1000, 25]: the kept iterate is the one after 1025
    # updates, i.e. a fit of 1025 updates (same seed, same minibatches), not one after 2025
    cols = chain_columns(copies=2)
    opts = FQEOptions(num_updates=2050, train_batch_size=24, lr=1e-4, target_update_period=25,
                      model_config={"fcnet_hiddens": [8]}, num_devices=1, update_mode="jit")
    whole = fit_fqe(cols, *SPECS, GAMMA, opts)
    half = fit_fqe(cols, *SPECS, GAMMA, opts._replace(num_updates=1025))
    obs, act = cols["obs"][:6], cols["actions"][:6]
    assert whole.metrics["fqe_backups_compared"] == 41.0
    np.testing.assert_allclose(whole.q_sa_prev(obs, act), half.q_sa(obs, act), atol=1e-6)
    assert not np.allclose(whole.q_sa(obs, act), half.q_sa(obs, act), atol=1e-2)  # it moved
