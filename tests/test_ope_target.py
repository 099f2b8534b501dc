"""`ope.target.from_acting`: the target policy OPE builds from an algorithm's acting spec
reads the params it is given, and a new checkpoint's target reuses the compiled functions of
the last one (each training evaluation builds one)."""

import gymnasium as gym
import jax.numpy as jnp
import numpy as np
import pytest

from rljax_offline import spaces as sp
from rljax_offline.models.distributions import categorical, squashed_gaussian
from rljax_offline.ope.target import from_acting

OBS = np.random.default_rng(0).normal(size=(7, 3)).astype(np.float32)


def _counting_linear_act():
    """`act(params, obs) = obs @ w`, counting how often jax traces it (once per compile)."""
    traces = []

    def act(params, obs):
        traces.append(obs.shape)
        return obs @ params["w"]

    return act, traces


def _params(seed, out_dim):
    return {"w": np.random.default_rng(seed).normal(size=(3, out_dim)).astype(np.float32)}


def test_discrete_targets_read_their_own_params_and_share_one_compile():
    act, traces = _counting_linear_act()
    dist = categorical(4, start=1)
    spec = sp.to_spec(gym.spaces.Discrete(4, start=1))
    actions = np.array([1, 2, 3, 4, 1, 2, 3])
    for seed in (1, 2, 3):  # three checkpoints of one run
        params = _params(seed, 4)
        target = from_acting(act, dist, params, spec, explore=True)
        logits = (OBS @ params["w"]).astype(np.float64)
        probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
        np.testing.assert_allclose(target.probs(OBS), probs, rtol=1e-5)
        np.testing.assert_allclose(target.logp(OBS, actions),
                                   np.log(probs[np.arange(7), actions - 1]), rtol=1e-5)
    assert len(traces) == 1, f"act traced {len(traces)} times for three checkpoints"


def test_box_targets_read_their_own_params_and_share_one_compile():
    space = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
    spec = sp.to_spec(space)
    dist = squashed_gaussian(spec)
    act, traces = _counting_linear_act()
    actions = np.clip(np.random.default_rng(5).normal(size=(7, 2)), -1.9, 1.9).astype(np.float32)
    half_width_log = 2 * np.log(2.0)
    for seed in (1, 2):
        params = _params(seed, 4)
        target = from_acting(act, dist, params, spec, explore=True)
        unit_logp = np.asarray(dist.logp(jnp.asarray(OBS @ params["w"]), jnp.asarray(actions)))
        np.testing.assert_allclose(target.logp(OBS, actions), unit_logp - half_width_log,
                                   rtol=1e-5, atol=1e-5)
        draws = target.samples(OBS, 3, seed=0)
        assert draws.shape == (7, 3, 2) and np.all(np.abs(draws) <= 2.0)
        greedy = from_acting(act, dist, params, spec, explore=False)
        expected = np.asarray(dist.greedy(jnp.asarray(OBS @ params["w"])))
        np.testing.assert_allclose(greedy.samples(OBS, 2)[:, 1], expected, rtol=1e-5)
    # logp, draw and greedy: one trace each, whichever checkpoint
    assert len(traces) == 3, f"act traced {len(traces)} times for two checkpoints"


@pytest.mark.parametrize("explore", [True, False])
def test_a_new_act_function_is_not_confused_with_a_cached_one(explore):
    spec = sp.to_spec(gym.spaces.Discrete(4))
    params = _params(1, 4)
    a = from_acting(lambda p, o: o @ p["w"], categorical(4), params, spec, explore)
    b = from_acting(lambda p, o: -(o @ p["w"]), categorical(4), params, spec, explore)
    assert not np.allclose(a.probs(OBS), b.probs(OBS))
