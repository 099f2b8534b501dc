"""Shared set-up of the zoo's tests (AWAC, CRR, BCQ, PLAS, BEAR, EDAC, ReBRAC, DiscreteBCQ):
Pendulum's spaces, a random batch of Q-learning columns, the short mixed-Pendulum learning
run's config, the check that a refusal is a one-line `ConfigError`, the check that acting
draws its candidates from the key it is given, and the export checks."""

import gymnasium as gym
import jax
import numpy as np
import pytest

from rljax_offline import spaces as sp
from rljax_offline.algorithms.config import ConfigError
from rljax_offline.export import load_stablehlo

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
ACT = gym.spaces.Box(-2, 2, (1,), np.float32)
SMALL = {"fcnet_hiddens": [16]}
N = 64


def random_batch(n=N, seed=0, action_bound=2.0):
    """Random Q-learning columns on `OBS` x `ACT` (actions within +-`action_bound`)."""
    rng = np.random.default_rng(seed)
    return {"obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            "new_obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            "actions": rng.uniform(-action_bound, action_bound, (n, 1)).astype(np.float32),
            "rewards": rng.normal(size=n).astype(np.float32),
            "terminateds": rng.random(n) < 0.1, "loss_mask": np.ones(n, np.float32)}


def keys(n=N, seed=0):
    return jax.random.split(jax.random.PRNGKey(seed), n)


def pendulum_config(config_class, data, updates, **training):
    """The learning tests' run: mixed Pendulum data, 64-64 networks, one device, an
    evaluation of 10 episodes every iteration, seed 0."""
    return (config_class().environment("Pendulum-v1").offline_data(input_=data)
            .training(num_updates_per_iteration=updates, **training)
            .rl_module(model_config={"fcnet_hiddens": [64, 64]}).learners(num_devices=1)
            .evaluation(evaluation_interval=1, evaluation_duration=10).debugging(seed=0))


def box_refusals(name, hint="", recurrent="use_lstm"):
    """The refusals every bounded-Box method of the zoo makes, as `(change, spaces, message)`
    rows for `assert_one_line_config_error`: Discrete actions (the message `{name} needs Box
    actions{hint}`), an unbounded Box, a recurrent model (`recurrent`), RLlib's single `lr`."""
    return [(lambda c: c, (OBS, gym.spaces.Discrete(2)), f"{name} needs Box actions{hint}"),
            (lambda c: c, (OBS, gym.spaces.Box(-np.inf, np.inf, (1,))), "finite bounds"),
            (lambda c: c.rl_module(model_config={recurrent: True}), None, "no recurrent form"),
            (lambda c: c.training(lr=1e-3), None, "lr is not used")]


def assert_one_line_config_error(config, change, spaces, message):
    """`change(config)`, validated and checked against `spaces` (gymnasium spaces, or None
    where the refusal comes first), is a `ConfigError` matching `message`, on one line."""
    with pytest.raises(ConfigError, match=message) as e:
        changed = change(config)
        changed.validate()
        changed.check_spaces(*(sp.to_spec(s) for s in spaces))
    assert "\n" not in str(e.value)


def assert_acting_follows_the_key(act, obs):
    """`act(key, obs)` (greedy actions) is a function of its key: the same key gives the same
    actions, another key other ones, all inside `ACT`'s bounds."""
    a, again, b = (np.asarray(act(jax.random.PRNGKey(k), obs)) for k in (1, 1, 2))
    np.testing.assert_array_equal(a, again)
    assert np.any(a != b)
    assert a.shape == (len(obs), 1) and np.all(np.abs(a) <= ACT.high[0])


def assert_export_acts_as_the_algorithm(algo, path):
    """The exported policy of a trained `algo` (saved at `path`, deterministic acting) gives
    the algorithm's greedy actions, inside `ACT`'s bounds."""
    x = np.random.default_rng(0).uniform(-1, 1, (50, 3)).astype(np.float32)
    exported = load_stablehlo(algo.export_policy(str(path)))
    np.testing.assert_allclose(exported(x)[0], algo.compute_actions(x), rtol=1e-5, atol=1e-5)
    assert np.all(np.abs(exported(x)[0]) <= ACT.high[0])


def assert_export_acts_with_a_fixed_key(algo, path):
    """The exported policy of a trained `algo` (saved at `path`) acts as one graph with its
    candidates drawn from a fixed key: the same observations give the same actions, inside
    `ACT`'s bounds."""
    x = np.random.default_rng(0).uniform(-1, 1, (50, 3)).astype(np.float32)
    exported = load_stablehlo(algo.export_policy(str(path)))
    first, again = exported(x)[0], exported(x)[0]
    np.testing.assert_array_equal(first, again)
    assert first.shape == (50, 1) and np.all(np.abs(first) <= ACT.high[0])
    return x
