"""Shared setup for the learner tests: configs of every algorithm on Discrete and Box spaces,
random learner columns for them, and float64 comparisons.

`ALGORITHM_CASES` is the one list the cross-cutting tests (modes agree, 8 devices == 1, masked
rows, checkpoints) run over. It follows from the registry: every registered algorithm, on each
action space its config's `check_spaces` accepts (one it refuses with a named error is its own
test file's business), with the test settings of `CASE_TRAINING` where a case needs them. An
algorithm joins the cross-cutting tests by its registry line alone.
"""

import gymnasium as gym
import jax
import numpy as np
import pytest

from rljax_offline import spaces as sp
from rljax_offline.algorithms import registry
from rljax_offline.errors import RljaxError

DISCRETE = (gym.spaces.Box(-5, 5, (4,), np.float32), gym.spaces.Discrete(2))
BOX = (gym.spaces.Box(-5, 5, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32))
SMALL_MODEL = {"fcnet_hiddens": [16, 16]}

# Training settings of the cases that need more than the config's defaults, by case id.
CASE_TRAINING = {
    # bc_iters=1: the actor's BC warm-up and SAC phases both run within the tests' 3 steps;
    # the Box case also covers the Lagrangian CQL weight and the entropy backup.
    "cql-discrete": {"target_network_update_freq": 2},
    "cql-box": {"bc_iters": 1, "num_actions": 3, "lagrangian": True,
                "deterministic_backup": False},
    "iql-box": {"tau": 0.005},
    "cal_ql-box": {"num_actions": 3},
    "edac-box": {"num_critics": 3},
    # each phase of a phased learner within the tests' 3 steps (skipped optimizer updates)
    "bcq-box": {"n_action_samples": 3, "rl_start_step": 1},
    "plas-box": {"warmup_steps": 1},
    "bear-box": {"warmup_steps": 1, "n_action_samples": 3, "n_target_samples": 3},
    "plas_with_perturbation-box": {"warmup_steps": 1},
    # the return acting conditions on has no default; a small transformer. Discrete: contexts
    # of 1 step, so a streamed epoch holds as many rows as flat ones (padded sequences count
    # whole), which the stream-resume test's epoch boundary needs
    "decision_transformer-box": {"target_return": -200.0, "context_size": 4, "num_layers": 1,
                                 "num_heads": 2},
    "discrete_decision_transformer-discrete": {"target_return": 100.0, "context_size": 1,
                                               "num_layers": 1, "num_heads": 2},
}


def accepts(config, spaces) -> bool:
    """Whether the algorithm takes these spaces (False: it refuses them with a named error)."""
    try:
        config.check_spaces(sp.to_spec(spaces[0]), sp.to_spec(spaces[1]))
    except RljaxError:
        return False
    return True


def _algorithm_cases():
    cases = []
    for name in registry.names():
        for kind, spaces in (("discrete", DISCRETE), ("box", BOX)):
            case_id = f"{name}-{kind}"
            config = (registry.config_class(name)().training(**CASE_TRAINING.get(case_id, {}))
                      .rl_module(model_config=SMALL_MODEL))
            if accepts(config, spaces):
                cases.append((case_id, config, spaces))
    return cases


# Algorithms with a value head on the policy's encoder when `vf_share_layers=True`: each also
# runs every cross-cutting test with shared layers (case id `<name>-<kind>-shared`).
SHARED_LAYERS_ALGORITHMS = ("marwil", "ppo")


def _shared_layers_cases(cases):
    return [(f"{case_id}-shared", config.rl_module(model_config={"vf_share_layers": True}),
             spaces) for case_id, config, spaces in cases
            if case_id.rsplit("-", 1)[0] in SHARED_LAYERS_ALGORITHMS]


# (id, config, (observation space, action space))
ALGORITHM_CASES = _algorithm_cases()
ALGORITHM_CASES += _shared_layers_cases(ALGORITHM_CASES)
assert set(CASE_TRAINING) <= {c[0] for c in ALGORITHM_CASES}, "CASE_TRAINING names no case"

# Cases whose algorithm trains from offline data (the resume-from-data tests run over these;
# an online algorithm samples its own data: tests/test_ppo.py covers PPO's checkpoints).
OFFLINE_ALGORITHM_CASES = [c for c in ALGORITHM_CASES if not c[1].trains_online]


def case_ids(cases=None):
    return [c[0] for c in (ALGORITHM_CASES if cases is None else cases)]


def case_named(name):
    """The case of `ALGORITHM_CASES` called `name` (a test that needs one algorithm, not all)."""
    for case in ALGORITHM_CASES:
        if case[0] == name:
            return case
    raise KeyError(f"no algorithm case named {name!r}; the cases are {case_ids()}")


# The default run's representatives in the tests that run once per algorithm: Discrete; Box
# with an actor, target copies and a Lagrangian weight; the sequence model. Every other case
# is marked slow there, so these tests' share of the default run stays the same as the registry
# grows (a new algorithm's own test file is what it adds), and CI, which runs the slow tests
# too, still checks every algorithm.
DEFAULT_RUN_CASES = ("cql-discrete", "cql-box", "decision_transformer-box")
assert set(DEFAULT_RUN_CASES) <= set(case_ids()), "DEFAULT_RUN_CASES names no case"


def with_slow_marks(cases=None):
    """`cases` (all of `ALGORITHM_CASES` by default) as pytest parameters, every case but
    `DEFAULT_RUN_CASES` marked slow."""
    return [c if c[0] in DEFAULT_RUN_CASES else pytest.param(c, marks=pytest.mark.slow)
            for c in (ALGORITHM_CASES if cases is None else cases)]


def names_with_slow_marks(default_names):
    """Every registered algorithm's name as a pytest parameter, every name but `default_names`
    (the default run's representatives, chosen by the test) marked slow."""
    assert set(default_names) <= set(registry.names()), f"{default_names}: not all registered"
    return [n if n in default_names else pytest.param(n, marks=pytest.mark.slow)
            for n in registry.names()]


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
        "next_actions": lambda: np.roll(actions, -1, axis=0),
        "next_actions_valid": lambda: (rng.random(n) < 0.9).astype(np.float32),
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
        "n_step": lambda: rng.integers(1, 4, n).astype(np.int32),
        "timesteps": lambda: rng.integers(0, 300, n).astype(np.int32),
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


def assert_leaves_equal(a, b):
    """The two trees hold as many leaves and each is bit for bit the same (the first that is
    not is named by its path in `a`)."""
    la, lb = jax.tree_util.tree_leaves_with_path(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb), (len(la), len(lb))
    for (path, x), y in zip(la, lb):
        assert np.array_equal(np.asarray(x), np.asarray(y)), jax.tree_util.keystr(path)
