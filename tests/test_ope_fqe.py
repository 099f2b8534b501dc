"""Fitted Q evaluation through the learner core (`rljax_offline.ope.fqe`): jitted, it reaches
the exact value of a tiny chain MDP, and 8 (fake) devices give the one-device fit."""

import gymnasium as gym
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.ope.fqe import fit_fqe
from rljax_offline.ope.methods import FQEOptions

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
                      model_config={"fcnet_hiddens": [32]}, num_devices=1, update_mode="jit")
    fit = fit_fqe(chain_columns(), *SPECS, GAMMA, opts)
    v = fit.v(np.eye(3, dtype=np.float32), np.tile(np.float32([1 - P_RIGHT, P_RIGHT]), (3, 1)))
    np.testing.assert_allclose(v, exact_values(), atol=0.03)
    assert fit.metrics["fqe_num_updates"] == 1500 and fit.metrics["fqe_updates_per_s"] > 0


def test_fqe_on_8_devices_equals_1():
    cols = chain_columns()
    fits = [fit_fqe(cols, *SPECS, GAMMA, FQEOptions(
        num_updates=40, train_batch_size=48, lr=3e-3, target_update_period=10,
        model_config={"fcnet_hiddens": [16]}, num_devices=n, update_mode=mode))
            for n, mode in ((1, "jit"), (8, "shard_map"))]
    obs = cols["obs"][:6]
    q = [f.q_sa(obs, cols["actions"][:6]) for f in fits]
    # the same minibatches and keys; only the order of float sums differs (8 partial sums)
    np.testing.assert_allclose(q[1], q[0], rtol=1e-4, atol=1e-5)
    assert not np.allclose(q[0], 0.0)
