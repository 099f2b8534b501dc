"""EDAC / SAC-N: CORL's defaults, the gradient-diversity term (k for identical critics, gone at
`eta=0`), its effect in training (the critics' action-gradients decorrelate where SAC-N's stay
aligned), the minimum over the ensemble in target and actor, the one-line refusals.

(8 devices == 1, the three update modes, masked rows, checkpoints: the cross-cutting tests.)"""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from offline_rl_testlib import run_updates, spec_of
from zoo_testlib import assert_one_line_config_error, box_refusals

from rljax_offline import spaces as sp
from rljax_offline.algorithms.edac import EDACConfig, diversity
from rljax_offline.learning.init import init_state
from rljax_offline.learning.update import BatchAxis
from rljax_offline.models.distributions import action_scaler
from rljax_offline.models.initializers import TORCH_DEFAULT
from rljax_offline.models.networks import continuous_q_network, ensemble

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
ACT = gym.spaces.Box(-2, 2, (2,), np.float32)
SMALL = {"fcnet_hiddens": [16, 16]}
N = 64


def random_batch(n=N, seed=0):
    rng = np.random.default_rng(seed)
    return {"obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            "new_obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            "actions": rng.uniform(-1.9, 1.9, (n, 2)).astype(np.float32),
            "rewards": rng.normal(size=n).astype(np.float32),
            "terminateds": rng.random(n) < 0.1, "loss_mask": np.ones(n, np.float32)}


def test_corl_defaults():
    c = EDACConfig()
    assert (c.num_critics, c.eta, c.actor_lr, c.critic_lr, c.alpha_lr) == (10, 1.0, 3e-4, 3e-4,
                                                                          3e-4)
    assert (c.train_batch_size_per_learner, c.gamma, c.tau, c.initial_alpha, c.algo_name) == (
        256, 0.99, 0.005, 1.0, "edac")
    assert c.model_config == {"fcnet_hiddens": [256, 256, 256], "fcnet_activation": "relu",
                              **TORCH_DEFAULT}


@pytest.mark.parametrize("change, spaces, message", [
    *box_refusals("EDACConfig"),
    (lambda c: c.training(eta=-1.0), None, "eta must be"),
])
def test_what_it_cannot_do_is_a_one_line_config_error(change, spaces, message):
    assert_one_line_config_error(EDACConfig(), change, spaces, message)


def networks(k):
    q = ensemble(continuous_q_network(sp.to_spec(OBS), sp.to_spec(ACT), SMALL), k)
    return q, action_scaler(sp.to_spec(ACT))


def test_diversity_is_k_for_identical_critics_and_smaller_for_independent_ones():
    q, (to_unit, from_unit) = networks(4)
    params = q.init(jax.random.PRNGKey(0))
    same = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x[:1], x.shape), params)
    batch = random_batch()
    unit = to_unit(jnp.asarray(batch["actions"]))
    es_same = diversity(q, same, batch["obs"], unit, from_unit, (2,))
    np.testing.assert_allclose(es_same, 4.0, rtol=1e-5)
    es = np.asarray(diversity(q, params, batch["obs"], unit, from_unit, (2,)))
    assert np.all(es < 4.0 - 1e-3) and np.all(np.isfinite(es))


def test_diversity_equals_the_row_by_row_definition():
    """Each critic's gradient w.r.t. each row's (unit-box) action on its own, then the summed
    off-diagonal cosine similarities over k - 1: what the one-pass-per-critic form computes."""
    q, (to_unit, from_unit) = networks(3)
    params = q.init(jax.random.PRNGKey(3))
    batch = random_batch(n=8, seed=4)
    unit = to_unit(jnp.asarray(batch["actions"]))
    expected = []
    for n in range(8):
        grads = []
        for i in range(3):
            one = jax.tree_util.tree_map(lambda x, i=i: x[i:i + 1], params)
            g = jax.grad(lambda u, one=one, n=n: q.apply(one, batch["obs"][n:n + 1],
                                                         from_unit(u)[None])[0, 0])(unit[n])
            grads.append(np.asarray(g) / np.linalg.norm(np.asarray(g)))
        sims = [grads[i] @ grads[j] for i in range(3) for j in range(3) if i != j]
        expected.append(sum(sims) / 2)
    got = diversity(q, params, batch["obs"], unit, from_unit, (2,))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_eta_zero_is_sac_n_the_td_loss_alone():
    batch, keys = random_batch(), jax.random.split(jax.random.PRNGKey(1), N)

    def critic(eta):
        spec = spec_of(EDACConfig().training(eta=eta, num_critics=3).rl_module(
            model_config=SMALL), OBS, ACT)
        params = jax.device_get(init_state(spec.learning, 0).params)
        loss = next(x for x in spec.learning.losses if x.name == "critic")
        return loss.fn(params, batch, keys, BatchAxis())

    sac_n, sac_n_metrics = critic(0.0)
    edac, metrics = critic(0.5)
    np.testing.assert_allclose(sac_n, sac_n_metrics["qf_loss"])
    np.testing.assert_allclose(edac, metrics["qf_loss"] + 0.5 * metrics["diversity_loss"],
                               rtol=1e-6)
    assert "diversity_loss" not in sac_n_metrics


def test_training_decorrelates_the_critics_gradients():
    """150 updates on one batch with 3 critics: with eta=1 the mean diversity term (summed
    pairwise cosine of the action-gradients over k - 1; k when all agree) ends well below
    SAC-N's (eta=0), whose critics, fitted to the same targets, align."""
    batch = random_batch()
    q, (to_unit, from_unit) = networks(3)
    unit = to_unit(jnp.asarray(batch["actions"]))
    ends = {}
    for eta in (0.0, 1.0):
        config = EDACConfig().training(eta=eta, num_critics=3, critic_lr=1e-3).rl_module(
            model_config=SMALL)
        state, _ = run_updates(spec_of(config, OBS, ACT), batch, 150)
        ends[eta] = float(np.mean(diversity(q, state.params["q"], batch["obs"], unit,
                                            from_unit, (2,))))
    assert ends[1.0] < ends[0.0] - 1.0, ends
