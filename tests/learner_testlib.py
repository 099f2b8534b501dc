"""Shared setup for the learner tests: configs of every algorithm on Discrete and Box spaces,
random learner columns for them, and float64 comparisons.

`ALGORITHM_CASES` is the one list the cross-cutting tests (modes agree, 8 devices == 1, masked
rows, checkpoints) run over: an algorithm joins them by adding its cases here.
"""

import gymnasium as gym
import jax
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.algorithms.bc import BCConfig
from rljax_offline.algorithms.cql import CQLConfig
from rljax_offline.algorithms.iql import IQLConfig
from rljax_offline.algorithms.marwil import MARWILConfig
from rljax_offline.algorithms.ppo.config import PPOConfig

DISCRETE = (gym.spaces.Box(-5, 5, (4,), np.float32), gym.spaces.Discrete(2))
BOX = (gym.spaces.Box(-5, 5, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32))
SMALL_MODEL = {"fcnet_hiddens": [16, 16]}

# (id, config, (observation space, action space))
ALGORITHM_CASES = [
    ("bc-discrete", BCConfig().rl_module(model_config=SMALL_MODEL), DISCRETE),
    ("bc-box", BCConfig().rl_module(model_config=SMALL_MODEL), BOX),
    ("marwil-discrete", MARWILConfig().rl_module(model_config=SMALL_MODEL), DISCRETE),
    ("marwil-box", MARWILConfig().rl_module(model_config=SMALL_MODEL), BOX),
    ("ppo-discrete", PPOConfig().rl_module(model_config=SMALL_MODEL), DISCRETE),
    ("ppo-box", PPOConfig().rl_module(model_config=SMALL_MODEL), BOX),
    # bc_iters=1: the actor's BC warm-up and SAC phases both run within the tests' 3 steps;
    # the Box case also covers the Lagrangian CQL weight and the entropy backup.
    ("cql-discrete", CQLConfig().training(target_network_update_freq=2)
     .rl_module(model_config=SMALL_MODEL), DISCRETE),
    ("cql-box", CQLConfig().training(bc_iters=1, num_actions=3, lagrangian=True,
                                     deterministic_backup=False)
     .rl_module(model_config=SMALL_MODEL), BOX),
    ("iql-discrete", IQLConfig().rl_module(model_config=SMALL_MODEL), DISCRETE),
    ("iql-box", IQLConfig().training(tau=0.005).rl_module(model_config=SMALL_MODEL), BOX),
]

# Cases whose algorithm trains from offline data (the resume-from-data tests run over these;
# PPO samples its own data online: tests/test_ppo.py covers its checkpoints).
OFFLINE_ALGORITHM_CASES = [c for c in ALGORITHM_CASES if c[1].algo_name != "ppo"]


def case_ids(cases=None):
    return [c[0] for c in (ALGORITHM_CASES if cases is None else cases)]


def random_columns(columns, obs_space, act_space, n, seed=0):
    """Plausible random values for every learner column an algorithm reads."""
    rng = np.random.default_rng(seed)
    obs_dim = int(np.prod(obs_space.shape))

    def obs():
        return rng.normal(size=(n, obs_dim)).astype(np.float32)

    if isinstance(act_space, gym.spaces.Discrete):
        actions = rng.integers(0, act_space.n, n).astype(np.int64)
    else:
        actions = rng.uniform(act_space.low, act_space.high,
                              (n, *act_space.shape)).astype(np.float32)
    makers = {
        "obs": obs, "new_obs": obs, "bootstrap_obs": obs,
        "actions": lambda: actions,
        "rewards": lambda: rng.normal(size=n).astype(np.float32),
        "terminateds": lambda: rng.random(n) < 0.1,
        "truncateds": lambda: np.zeros(n, bool),
        "returns_to_go": lambda: (10 * rng.random(n)).astype(np.float32),
        "bootstrap_discount": lambda: (rng.random(n) * (rng.random(n) < 0.3)).astype(
            np.float32),
        "action_logp": lambda: np.log(rng.uniform(0.2, 0.9, n)).astype(np.float32),
        "advantages": lambda: rng.normal(size=n).astype(np.float32),
        "value_targets": lambda: (10 * rng.random(n)).astype(np.float32),
        "vf_preds": lambda: (10 * rng.random(n)).astype(np.float32),
    }
    missing = [c for c in columns if c not in makers]
    assert not missing, f"learner_testlib has no random maker for columns {missing}"
    return {c: makers[c]() for c in columns}


def spec_for(config, spaces):
    """The config's `AlgorithmSpec` for gymnasium spaces."""
    obs_space, act_space = spaces
    return config.make_spec(sp.to_spec(obs_space), sp.to_spec(act_space))


def to_float64(tree):
    return jax.tree_util.tree_map(
        lambda x: np.asarray(x, np.float64) if np.issubdtype(np.asarray(x).dtype, np.floating)
        else x, tree)


def max_diff(a, b):
    return max([0.0, *jax.tree_util.tree_leaves(jax.tree_util.tree_map(
        lambda x, y: float(np.max(np.abs(np.asarray(x, np.float64) -
                                         np.asarray(y, np.float64)))), a, b))])
