"""Action distributions speak the env's action values, `Discrete(n, start=s)` included."""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax_offline import spaces as sp
from rljax_offline.models.distributions import for_space

TOL = 8 * np.finfo(np.float32).eps  # a few float32 roundings in log_softmax / logsumexp


@pytest.mark.parametrize("start", [0, -1, 5])
@pytest.mark.parametrize("jit", [False, True])
def test_discrete_start_logp_sample_greedy_in_env_values(start, jit):
    space = gym.spaces.Discrete(3, start=start)
    dist = for_space(sp.to_spec(space))
    wrap = jax.jit if jit else (lambda f: f)
    logits = jnp.asarray([[0.1, 2.0, -1.0], [3.0, 0.0, 0.5]], jnp.float32)
    values = jnp.arange(start, start + 3)
    logps = jnp.stack([wrap(dist.logp)(logits, jnp.full((2,), v)) for v in values], -1)
    assert np.all(np.isfinite(np.asarray(logps)))
    np.testing.assert_allclose(np.exp(np.asarray(logps)).sum(-1), 1.0, atol=TOL * 3)
    np.testing.assert_allclose(logps, jax.nn.log_softmax(logits, -1), atol=TOL)
    greedy = np.asarray(wrap(dist.greedy)(logits))
    assert greedy.tolist() == [start + 1, start + 0]
    samples = np.asarray(wrap(dist.sample)(jnp.zeros((2000, 3)), jax.random.PRNGKey(0)))
    assert set(samples.tolist()) == set(range(start, start + 3))
    assert all(space.contains(int(a)) for a in samples[:50])


def test_discrete_logp_of_action_outside_the_space_is_the_lowest_float():
    """Finite, so a padded row (weight 0) adds 0 to a loss, never NaN."""
    dist = for_space(sp.to_spec(gym.spaces.Discrete(3, start=2)))
    logp = np.asarray(dist.logp(jnp.zeros((3, 3)), jnp.asarray([0, 1, 5])))
    assert np.all(logp == np.finfo(np.float32).min)
    assert float(jnp.sum(jnp.asarray(logp) * 0.0)) == 0.0
