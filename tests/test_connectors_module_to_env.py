"""Module-to-env pieces: sample or argmax by `ctx.explore`, `action_logp`, clip and unsquash
Box actions into the action space."""

import gymnasium as gym
import jax
import numpy as np
from connector_testlib import ACT, OBS, random_episodes

from rljax_offline import EpisodeBatch
from rljax_offline.connectors import (
    Context,
    Spaces,
    clip_actions,
    default_module_to_env,
    get_actions,
    pipeline,
)

SPACES = Spaces.of(OBS, ACT)
BOX = gym.spaces.Box(np.array([-2.0], np.float32), np.array([1.0], np.float32))


_JITTED = {}


def _apply(pipe, spaces, eps, inputs, ctx):
    f = _JITTED.setdefault(id(pipe.apply), jax.jit(pipe.apply))
    return f(pipe.init(spaces), EpisodeBatch.from_episodes(eps),
             {"action_dist_inputs": inputs}, ctx)[1]


def test_discrete_argmax_sample_and_logp():
    eps = random_episodes(n=4, seed=7)
    m2e = default_module_to_env(SPACES)
    logits = np.array([[0, 5, 0], [9, 0, 0], [0, 0, 9], [1, 2, 3]], np.float32)
    out = _apply(m2e, SPACES, eps, logits, Context(rng=jax.random.PRNGKey(0), explore=False))
    np.testing.assert_array_equal(out["actions"], [1, 0, 2, 2])
    l64 = logits.astype(np.float64)
    logp = l64 - np.log(np.exp(l64).sum(1, keepdims=True))
    np.testing.assert_allclose(out["action_logp"], logp[np.arange(4), [1, 0, 2, 2]], rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_array_equal(out["actions_for_env"], out["actions"])
    probs = np.log(np.array([[0.2, 0.3, 0.5]] * 4, np.float32))
    sampled = np.concatenate([np.asarray(_apply(
        m2e, SPACES, eps, probs,
        Context(rng=jax.random.PRNGKey(s), explore=True))["actions"]) for s in range(100)])
    freq = np.bincount(sampled, minlength=3) / sampled.size
    np.testing.assert_allclose(freq, [0.2, 0.3, 0.5], atol=0.08)


def test_box_mean_clip_unsquash_and_sample():
    eps = random_episodes(n=4, seed=7)
    beps = [e.replace(actions=np.zeros((len(e.actions), 1), np.float32), action_space=BOX)
            for e in eps]
    spaces = Spaces.of(OBS, BOX)
    inputs = np.array([[5.0, 0.0], [-5.0, 0.0], [0.5, 0.0], [0.0, 0.0]], np.float32)
    out = _apply(pipeline(get_actions(), clip_actions()), spaces, beps, inputs, Context())
    # the recorded action is the env's, clipped, and its logp is that action's (std 1)
    np.testing.assert_allclose(out["actions"][:, 0], [1.0, -2.0, 0.5, 0.0])
    np.testing.assert_allclose(out["actions_for_env"][:, 0], [1.0, -2.0, 0.5, 0.0])
    gap = np.array([4.0, 3.0, 0.0, 0.0])
    np.testing.assert_allclose(out["action_logp"], -0.5 * np.log(2 * np.pi) - 0.5 * gap ** 2,
                               rtol=1e-5)
    raw = _apply(pipeline(get_actions(clip=False), clip_actions()), spaces, beps, inputs,
                 Context())
    np.testing.assert_allclose(raw["actions"][:, 0], inputs[:, 0])
    np.testing.assert_allclose(raw["action_logp"], -0.5 * np.log(2 * np.pi), rtol=1e-5)
    # a module in [-1, 1] units: its actions are unsquashed onto the bounds, not clipped
    out = _apply(pipeline(get_actions(clip=False), clip_actions(unsquash=True)), spaces, beps,
                 inputs, Context())
    np.testing.assert_allclose(out["actions_for_env"][:, 0], [1.0, -2.0, 0.25, -0.5])
    noisy = np.array([[0.0, np.log(0.5)]] * 4, np.float32)
    m2e = default_module_to_env(spaces)
    draws = np.concatenate([np.asarray(_apply(
        m2e, spaces, beps, noisy,
        Context(rng=jax.random.PRNGKey(s), explore=True))["actions"])[:, 0] for s in range(200)])
    assert abs(draws.std() - 0.5) < 0.06 and abs(draws.mean()) < 0.06
