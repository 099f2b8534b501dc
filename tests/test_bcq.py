"""BCQ: d3rlpy's names and defaults, the VAE's loss, the lambda-mixed target, candidates drawn
with the acting key, the imitator-only start (`rl_start_step`), the one-line refusals, exact
resume, export, and a short learning run on mixed Pendulum data that fails without the
candidates' selection.

(8 devices == 1, the three update modes, masked rows, checkpoints: the cross-cutting tests.)"""

import jax
import numpy as np
import optax
import pytest
from learner_testlib import max_diff
from offline_rl_testlib import (
    assert_resume_is_exact,
    evaluation_returns,
    level,
    run_updates,
    spec_of,
)
from zoo_testlib import (
    ACT,
    OBS,
    SMALL,
    assert_acting_follows_the_key,
    assert_export_acts_with_a_fixed_key,
    assert_one_line_config_error,
    box_refusals,
    keys,
    pendulum_config,
    random_batch,
)

from rljax_offline import spaces as sp
from rljax_offline.algorithms.bcq import BCQConfig
from rljax_offline.algorithms.vae import conditional_vae, vae_loss
from rljax_offline.learning.init import init_state
from rljax_offline.learning.losses import per_example_normal
from rljax_offline.learning.update import BatchAxis
from rljax_offline.models.initializers import TORCH_DEFAULT


def test_d3rlpy_defaults():
    c = BCQConfig()
    assert (c.actor_lr, c.critic_lr, c.imitator_lr, c.train_batch_size_per_learner) == (
        1e-3, 1e-3, 1e-3, 100)
    assert (c.gamma, c.tau, c.n_critics, c.lam, c.n_action_samples) == (
        0.99, 0.005, 2, 0.75, 100)
    assert (c.action_flexibility, c.rl_start_step, c.beta, c.lr, c.algo_name) == (
        0.05, 0, 0.5, None, "bcq")
    assert c.squash_decoder is False  # d3rlpy 2.8's decoder skips the tanh at its default
    assert c.model_config == {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu",
                              **TORCH_DEFAULT}


@pytest.mark.parametrize("change, spaces, message", [
    *box_refusals("BCQConfig", hint=".*DiscreteBCQ"),
    (lambda c: c.training(lam=1.5), None, "lam must be"),
    (lambda c: c.training(n_action_samples=0), None, "n_action_samples must be"),
])
def test_what_it_cannot_do_is_a_one_line_config_error(change, spaces, message):
    assert_one_line_config_error(BCQConfig(), change, spaces, message)


def test_vae_loss_is_reconstruction_plus_beta_kl():
    vae = conditional_vae(sp.to_spec(OBS), 1, 2, SMALL)
    params = vae.init(jax.random.PRNGKey(0))
    batch = random_batch()
    unit = batch["actions"] / 2.0
    loss, m = vae_loss(vae, params, batch["obs"], unit, keys(), beta=0.5)
    mu, log_std = vae.encode(params, batch["obs"], unit)
    kl = np.mean(0.5 * (mu**2 + np.exp(2 * log_std) - 1) - log_std, axis=-1)
    np.testing.assert_allclose(m["vae_kl"], kl, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(loss, m["vae_recon_loss"] + 0.5 * kl, rtol=1e-5, atol=1e-7)
    assert np.all(np.asarray(m["vae_kl"]) >= 0)
    assert np.all(np.abs(vae.decode(params, batch["obs"], 100 * mu)) <= 1.0)


def test_raw_decoder_fits_its_output_and_squash_decoder_fits_the_tanh():
    """With the raw decoder (the default, d3rlpy 2.8's) the VAE's reconstruction is of the
    decoder's raw output and its proposals leave the unit box, while the perturbation's clip
    still keeps every action inside the bounds; `squash_decoder=True` (the paper's) fits the
    tanh of the same output."""
    batch, ks = random_batch(), keys()
    unit = batch["actions"] / 2.0
    recon = {}
    for squash in (True, False):
        config = BCQConfig().training(squash_decoder=squash, n_action_samples=4).rl_module(
            model_config=SMALL)
        spec = spec_of(config, OBS, ACT)
        params = jax.device_get(init_state(spec.learning, 0).params)
        imitator = next(loss for loss in spec.learning.losses if loss.name == "imitator")
        recon[squash] = np.asarray(imitator.fn(params, batch, ks, BatchAxis())[1][
            "vae_recon_loss"])
        actions = spec.acting.dist.greedy(spec.acting.act_with_key(
            params, jax.random.PRNGKey(1), random_batch(256)["obs"]))
        assert np.all(np.abs(np.asarray(actions)) <= 2.0)
    vae = conditional_vae(sp.to_spec(OBS), 1, 2, SMALL, squash=False)
    mu, log_std = vae.encode(params["vae"], batch["obs"], unit)
    z = mu + np.exp(log_std) * per_example_normal(ks, (2,))
    raw = vae.decode_pre_tanh(params["vae"], batch["obs"], z)
    np.testing.assert_allclose(recon[False], np.mean((raw - unit) ** 2, axis=-1),
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(recon[True], np.mean((np.tanh(raw) - unit) ** 2, axis=-1),
                               rtol=1e-5, atol=1e-6)
    far = vae.decode(params["vae"], batch["obs"], 1e3 * np.ones((len(unit), 2), np.float32))
    assert np.max(np.abs(far)) > 1.0


def test_target_mixes_the_critics_min_and_max_by_lam():
    """With the same params and keys, the target falls as `lam` moves weight from the
    critics' maximum to their minimum (lam=1: clipped double Q; lam=0: the optimistic max)."""
    targets = {}
    for lam in (0.0, 0.75, 1.0):
        config = BCQConfig().training(lam=lam, n_action_samples=8).rl_module(
            model_config=SMALL)
        spec = spec_of(config, OBS, ACT)
        params = jax.device_get(init_state(spec.learning, 0).params)
        critic = next(loss for loss in spec.learning.losses if loss.name == "critic")
        _, metrics = critic.fn(params, random_batch(), keys(), BatchAxis())
        targets[lam] = np.asarray(metrics["td_target_mean"])
    assert np.all(targets[0.0] >= targets[0.75] - 1e-6)
    assert np.all(targets[0.75] >= targets[1.0] - 1e-6)
    assert np.mean(targets[0.0] - targets[1.0]) > 1e-3  # the critics differ


def test_losses_decrease_and_rl_start_step_holds_the_critic_and_actor():
    """The first `rl_start_step` updates train the VAE alone; the critic's and the actor's
    Adam states stay as they were (step count 0), as d3rlpy skips those updates."""
    config = BCQConfig().training(n_action_samples=5, rl_start_step=3).rl_module(
        model_config=SMALL)
    spec = spec_of(config, OBS, ACT)
    start = jax.device_get(init_state(spec.learning, 0).params)
    (s3, m3), (s4, _), (s200, m200) = run_updates(spec, random_batch(), 3, 4, 200)
    assert max_diff(s3.params["vae"], start["vae"]) > 0
    for net in ("q", "policy"):
        assert max_diff(s3.params[net], start[net]) == 0.0, net
        assert max_diff(s4.params[net], start[net]) > 0, net
    for net in ("target_q", "target_policy"):  # Polyak towards an unchanged copy: rounding
        assert max_diff(s3.params[net], start[net]) < 1e-6, net
    adam = optax.ScaleByAdamState
    counts = lambda state, name: [int(x.count) for x in jax.tree_util.tree_leaves(
        state.opt_states[name], is_leaf=lambda x: isinstance(x, adam)) if isinstance(x, adam)]
    assert set(counts(s3, "critic")) == set(counts(s3, "actor")) == {0}
    assert set(counts(s4, "critic")) == {1} and set(counts(s3, "imitator")) == {3}
    assert float(m200["vae_loss"]) < 0.8 * float(m3["vae_loss"])


def test_acting_draws_its_candidates_from_the_key():
    config = BCQConfig().training(n_action_samples=4, action_flexibility=0.5).rl_module(
        model_config=SMALL)
    spec = spec_of(config, OBS, ACT)
    params = jax.device_get(init_state(spec.learning, 0).params)
    obs = random_batch(256)["obs"]
    assert_acting_follows_the_key(jax.jit(
        lambda k, o: spec.acting.dist.greedy(spec.acting.act_with_key(params, k, o))), obs)


def test_resume_is_exact(pendulum_mixed, tmp_path):
    config = pendulum_config(BCQConfig, pendulum_mixed, 4, rl_start_step=6,
                             n_action_samples=10)
    assert_resume_is_exact(config.evaluation(evaluation_interval=0), tmp_path)


@pytest.mark.slow
def test_learns_mixed_pendulum_where_its_candidate_selection_matters(pendulum_mixed):
    """10% expert, 90% random-torque Pendulum episodes (behavior cloning stays near -1,050),
    4,000 updates at d3rlpy's defaults (batch 100, learning rates 1e-3) but 10 candidates
    (d3rlpy's 100: -583 and -566, three times the time) with 64-64 networks: the level (mean
    of the last two evaluations) clears -800 (measured -608 and -514 for seeds 0 and 1).
    Without the selection (`n_action_samples=1`, `action_flexibility=0`: the VAE's action,
    behavior cloning) the same run ends at -1,266."""
    returns = evaluation_returns(
        pendulum_config(BCQConfig, pendulum_mixed, 1000, n_action_samples=10), 4)
    assert level(returns) >= -800, returns


def test_exported_policy_acts_with_a_fixed_key(pendulum_mixed, tmp_path):
    """Export follows from the registry line: one graph, the candidates drawn from a fixed
    key, so the same observations give the same actions, inside the bounds."""
    algo = pendulum_config(BCQConfig, pendulum_mixed, 2).rl_module(
        model_config={"fcnet_hiddens": [16]}).evaluation(evaluation_interval=0).build()
    algo.train()
    x = assert_export_acts_with_a_fixed_key(algo, tmp_path / "policy.stablehlo")
    assert np.all(np.abs(algo.compute_actions(x)) <= 2.0)
    algo.stop()
