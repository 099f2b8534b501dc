"""PPO and RLlib's offline-data guide end to end: a PPO expert reaches 450 on CartPole-v1,
its checkpoint records episodes through the CLI (mean >= 400), BC trained on them reaches 450,
PPO fine-tunes from a BC checkpoint; plus the parts on their own (GAE against a reference,
continuing rollouts, the epoch program, config defaults, named errors)."""

import json
import os
import shutil
import subprocess
import sys

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from learner_testlib import max_diff, to_float64

from rljax_offline import Algorithm, BCConfig, ConfigError, PPOConfig
from rljax_offline.acting.env_runner import EnvRunner
from rljax_offline.acting.recording import PolicyMismatchError, record_policy
from rljax_offline.algorithms.ppo.config import general_advantage_estimation
from rljax_offline.apps.workflow import (
    TARGET,
    cartpole_bc_config,
    cartpole_ppo_config,
    train_bc_until,
    train_ppo_until,
)
from rljax_offline.connectors import Context, Spaces, default_learner, pipeline
from rljax_offline.data import read_episodes
from rljax_offline.episode.batch import EpisodeBatch
from rljax_offline.episode.episode import Episode
from rljax_offline.learning.data_parallel import DataParallel, select_devices
from rljax_offline.learning.init import init_state
from rljax_offline.models.actor_critic import critic

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------- the guide, end to end


@pytest.fixture(scope="module")
def ppo_expert(tmp_path_factory):
    """One PPO run to 450 (fixed seed), checkpointed; shared by the end-to-end tests."""
    run = train_ppo_until(cartpole_ppo_config(seed=0), max_env_steps=100_000)
    path = str(tmp_path_factory.mktemp("ppo") / "checkpoint")
    run.algo.save(path)
    yield run, path
    run.algo.stop()


@pytest.fixture(scope="module")
def recorded(ppo_expert, tmp_path_factory):
    """20 greedy episodes of the PPO expert, recorded through the CLI."""
    _, ckpt = ppo_expert
    out = str(tmp_path_factory.mktemp("recorded"))
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "rljax_offline.cli", "record", "--env",
                           "CartPole-v1", "--policy", ckpt, "--output", out, "--episodes", "20"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["policy"] == ckpt and summary["episodes"] == 20
    return out


@pytest.mark.slow
def test_ppo_reaches_450_on_cartpole(ppo_expert):
    run, _ = ppo_expert
    assert run.reached_at is not None, run.curve
    print(f"PPO reached {TARGET} after {run.reached_at} env steps in {run.seconds:.1f} s")
    result = run.algo.history[-1]
    assert result["env_runners"]["episode_return_mean"] >= TARGET
    assert result["num_env_steps_sampled_lifetime"] == run.reached_at
    learner = result["learners"]["default_policy"]
    assert {"policy_loss", "vf_loss", "entropy", "mean_kl_loss", "curr_kl_coeff",
            "vf_explained_var"} <= set(learner)


@pytest.mark.slow
def test_checkpoint_records_episodes_through_the_cli(recorded):
    episodes = read_episodes(recorded)
    returns = [ep.get_return() for ep in episodes]
    assert len(episodes) == 20
    assert np.mean(returns) >= 400, returns
    assert all(ep.is_done for ep in episodes)


@pytest.mark.slow
def test_bc_on_the_recording_reaches_450(recorded):
    run = train_bc_until(cartpole_bc_config(recorded), max_iterations=8)
    assert run.reached_at is not None, run.curve
    run.algo.stop()


@pytest.mark.slow
def test_fine_tuning_starts_from_the_bc_policy_with_a_warm_value(recorded, tmp_path):
    bc = cartpole_bc_config(recorded).build()
    bc.train()
    bc.save(str(tmp_path / "bc"))
    algo = cartpole_ppo_config(init_policy_from=str(tmp_path / "bc")).build()
    # The BC policy's weights, exactly; the value network fitted to the data's returns.
    bc_policy = jax.device_get(bc.state.params["policy"])
    ppo_policy = jax.device_get(algo.state.params["policy"])
    for a, b in zip(jax.tree_util.tree_leaves(bc_policy), jax.tree_util.tree_leaves(ppo_policy)):
        np.testing.assert_array_equal(a, b)
    assert algo.config.input_ == recorded  # the checkpoint's data, for the warm-up
    warm = algo.warmup_metrics
    # The last update's loss far under the mean over the warm-up's updates (the early ones
    # regress returns near 100 from an untrained V); first train's explained variance > 0.
    assert warm["vf_loss"] < 0.2 * warm["vf_loss_mean"], warm
    first = algo.train()
    assert first["learners"]["default_policy"]["vf_explained_var"] > 0.0
    assert first["fine_tuned_from"] == str(tmp_path / "bc")
    # The fine-tuned checkpoint stands alone: restoring it does not need the BC checkpoint.
    algo.save(str(tmp_path / "tuned"))
    shutil.rmtree(tmp_path / "bc")
    back = Algorithm.from_checkpoint(str(tmp_path / "tuned"))
    assert back.iteration == 1 and back.history[-1]["fine_tuned_from"] == str(tmp_path / "bc")
    back.stop()
    algo.stop()
    bc.stop()


# ---------------------------------------------------------------------- the parts


def test_config_has_rllibs_names_and_defaults():
    c = PPOConfig()
    assert (c.lr, c.gamma, c.lambda_, c.clip_param, c.vf_clip_param, c.vf_loss_coeff,
            c.entropy_coeff, c.kl_coeff, c.kl_target, c.num_epochs, c.minibatch_size,
            c.train_batch_size_per_learner, c.num_envs_per_env_runner) == (
        5e-5, 0.99, 1.0, 0.3, 10.0, 1.0, 0.0, 0.2, 0.01, 30, 128, 4000, 1)
    with pytest.raises(ConfigError, match="minibatch_size=512 is larger"):
        PPOConfig().training(minibatch_size=512, train_batch_size_per_learner=256)
    with pytest.raises(ConfigError, match="clip_param"):
        PPOConfig().training(clip_param=-1.0)


def _episode(rewards, terminated, truncated=False, t_started=0):
    n = len(rewards)
    obs = np.random.default_rng(n).normal(size=(n + 1, 3)).astype(np.float32)
    return Episode(observations=list(obs), actions=[0] * n, rewards=list(rewards),
                   terminated=terminated, truncated=truncated, t_started=t_started,
                   observation_space=gym.spaces.Box(-10, 10, (3,), np.float32),
                   action_space=gym.spaces.Discrete(2),
                   extra_model_outputs={"action_logp": [-0.5] * n})


def test_gae_matches_a_per_episode_reference():
    """Terminated (no bootstrap), truncated and cut (bootstrap from V of the last obs)."""
    gamma, lam = 0.9, 0.8
    episodes = [_episode([1.0, 2.0, 0.5], terminated=True),
                _episode([1.0] * 5, terminated=False, truncated=True),
                _episode([0.3, -1.0], terminated=False)]
    spaces = Spaces.of(episodes[0].observation_space, episodes[0].action_space)
    value = critic(spaces.observation, {"fcnet_hiddens": [8]})
    params = {"value": value.init(jax.random.PRNGKey(0))}
    pipe = pipeline(default_learner(spaces), general_advantage_estimation(gamma, lam, value))
    eb = EpisodeBatch.from_episodes(episodes)
    _, batch, _ = pipe.apply(pipe.init(spaces), eb, {}, Context(params=params))
    mask = np.asarray(batch["loss_mask"])
    got_adv = np.asarray(batch["advantages"])[mask]
    got_targets = np.asarray(batch["value_targets"])[mask]
    ref_adv, ref_targets = [], []
    for ep in episodes:
        v = np.asarray(value.apply(params, jnp.asarray(np.stack(ep.observations))))
        v_next = v[1:].copy()
        if ep.is_terminated:
            v_next[-1] = 0.0
        r = np.asarray(ep.rewards)
        adv, running = np.zeros(len(r)), 0.0
        for t in reversed(range(len(r))):
            running = r[t] + gamma * v_next[t] - v[t] + gamma * lam * running
            adv[t] = running
        ref_adv.append(adv)
        ref_targets.append(adv + v[:-1])
    ref_adv, ref_targets = np.concatenate(ref_adv), np.concatenate(ref_targets)
    # float32 network and sums of a few terms: relative rounding ~1e-6
    np.testing.assert_allclose(got_adv, ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_targets, ref_targets, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="Context\\(params=...\\)"):
        pipe.apply(pipe.init(spaces), eb, {}, Context())


def test_rollouts_continue_episodes_across_calls():
    runner = EnvRunner("CartPole-v1", lambda obs: np.zeros(len(obs), np.int64), num_envs=2,
                       seed=3)
    chunks1, finished1 = runner.sample_continuing(15)
    chunks2, finished2 = runner.sample_continuing(40)
    # Always pushing left ends CartPole in ~10 steps: some episodes span the two calls.
    assert sum(len(c) for c in chunks1) in (15, 16) and sum(len(c) for c in chunks2) >= 40
    cut = [c for c in chunks1 if not c.is_done]
    assert cut and all(c.t_started == 0 for c in cut)
    continued = [c for c in chunks2 if c.t_started > 0]
    assert len(continued) == len(cut)
    for r, n in finished2:  # whole-episode return and length, over both chunks
        assert r == n and n >= 8
    assert len(finished1) + len(finished2) >= 4
    runner.close()


def test_epoch_program_runs_every_minibatch_and_eight_devices_equal_one_in_float64():
    config = PPOConfig().rl_module(model_config={"fcnet_hiddens": [16]})
    from rljax_offline import spaces as sp

    learning = config.make_spec(sp.to_spec(gym.spaces.Box(-5, 5, (4,), np.float32)),
                                sp.to_spec(gym.spaces.Discrete(2))).learning
    rng = np.random.default_rng(0)
    n = 200
    data = {"obs": rng.normal(size=(n, 4)).astype(np.float32),
            "actions": rng.integers(0, 2, n), "action_logp": np.full(n, np.log(0.5), np.float32),
            "advantages": rng.normal(size=n).astype(np.float32),
            "value_targets": rng.normal(size=n).astype(np.float32),
            "vf_preds": np.zeros(n, np.float32)}
    out, out_m = {}, {}
    with jax.enable_x64(True):  # float64, as test_learner_core.py checks the other algorithms
        data = to_float64(data)
        for n_dev, mode in ((1, "jit"), (8, "shard_map"), (8, "pmap")):
            dp = DataParallel(learning, select_devices(n_dev), 64, mode=mode)
            state = dp.put_replicated(to_float64(init_state(learning, 1)))
            state, metrics = dp.epochs_on_device(3)(state, dp.put_replicated(data))
            out[mode], out_m[mode] = jax.device_get((state, metrics))
            assert int(out[mode].step) == 3 * (200 // 64)
            assert np.isfinite(float(metrics["total_loss_mean"]))
    for mode in ("shard_map", "pmap"):  # pmap too: every argument replicated is fine
        diff = max_diff(out["jit"].params, out[mode].params)
        print(f"PPO {mode}x8 vs jit after 9 minibatch updates: {diff:.3g}")
        assert diff < 1e-9, (mode, diff)  # summation order only
        assert max_diff(out["jit"].opt_states, out[mode].opt_states) < 1e-9
        assert out_m[mode].keys() == out_m["jit"].keys()
        for k, v in out_m["jit"].items():  # the loss values see a sum-instead-of-mean bug
            np.testing.assert_allclose(out_m[mode][k], v, rtol=1e-9, atol=1e-9, err_msg=k)


def test_ppo_checkpoint_restores_and_acts(tmp_path):
    config = cartpole_ppo_config(train_batch_size_per_learner=512, minibatch_size=128,
                                 num_epochs=2)
    algo = config.build()
    algo.train()
    algo.save(str(tmp_path / "ckpt"))
    back = Algorithm.from_checkpoint(str(tmp_path / "ckpt"))
    assert type(back).__name__ == "PPO" and back.iteration == 1
    assert back.env_steps_sampled == algo.env_steps_sampled >= 512
    for a, b in zip(jax.tree_util.tree_leaves(jax.device_get(algo.state.params)),
                    jax.tree_util.tree_leaves(jax.device_get(back.state.params))):
        np.testing.assert_array_equal(a, b)
    assert back.compute_actions(np.zeros((2, 4), np.float32)).shape == (2,)
    assert back.train()["training_iteration"] == 2
    algo.stop()
    back.stop()


def test_a_policy_for_other_spaces_is_a_named_error_before_recording(tmp_path):
    BCConfig().environment("Pendulum-v1").build().save(str(tmp_path / "pendulum_bc"))
    out = tmp_path / "never"
    with pytest.raises(PolicyMismatchError, match="observation space"):
        record_policy("CartPole-v1", str(tmp_path / "pendulum_bc"), str(out), num_episodes=2,
                      progress=False)
    assert not out.exists() or not any(out.iterdir())
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "rljax_offline.cli", "record", "--policy",
                           str(tmp_path / "pendulum_bc"), "--output", str(out)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2 and "observation space" in proc.stderr, proc.stderr
    assert not out.exists() or not any(out.iterdir())
    with pytest.raises(PolicyMismatchError, match="observation space"):
        PPOConfig().environment("CartPole-v1").training(
            init_policy_from=str(tmp_path / "pendulum_bc"), value_warmup_updates=0).build()


def test_workflow_figure_and_demo_full_flag(tmp_path):
    from rljax_offline.apps.plotting import save_workflow_curves
    from rljax_offline.cli import build_parser

    path = save_workflow_curves([(2048, 20.0), (4096, 60.0)], [(50, 300.0), (100, 480.0)],
                                [(2048, 300.0), (4096, 470.0)], str(tmp_path / "w.png"),
                                target=TARGET, data_return=490.0)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    args = build_parser().parse_args(["demo", "--full", "--episodes", "30"])
    assert args.full and args.episodes == 30
    args = build_parser().parse_args(["record", "--policy", "ckpt", "--output", "o"])
    assert args.policy == "ckpt" and not args.explore


def test_ppo_samples_and_trains_box_actions_over_two_devices():
    algo = (PPOConfig().environment("Pendulum-v1").env_runners(num_envs_per_env_runner=4)
            .training(train_batch_size_per_learner=256, minibatch_size=64, num_epochs=2)
            .rl_module(model_config={"fcnet_hiddens": [16]}).learners(num_devices=2)).build()
    result = algo.train()
    learner = result["learners"]["default_policy"]
    assert learner["num_module_steps_trained"] == 2 * 4 * 64
    assert all(np.isfinite(learner[k]) for k in ("policy_loss", "vf_loss", "entropy"))
    # Pendulum's squared errors are large: RLlib's default vf_clip_param=10 clips them.
    assert learner["vf_loss"] <= 10.0
    assert result["env_runners"]["num_env_steps_sampled"] >= 256
    assert np.isnan(result["env_runners"]["episode_return_mean"])  # no episode ended yet
    algo.stop()


def test_ppo_records_clipped_box_actions_with_their_own_log_probability():
    """The plain Gaussian's draws beyond Pendulum's bounds (+-2) are recorded as the env ran
    them, clipped, with the log-probability of the clipped action: PPO's first ratio on the
    recorded rows is exactly 1 (RLlib records the unclipped draw instead)."""
    algo = (PPOConfig().environment("Pendulum-v1").env_runners(num_envs_per_env_runner=4)
            .training(train_batch_size_per_learner=256, minibatch_size=256, num_epochs=1)
            .rl_module(model_config={"fcnet_hiddens": [16]}).learners(num_devices=1)
            .debugging(seed=0)).build()
    try:
        chunks, _ = algo.sample_steps(256)
        dist = algo.policy().module.dist
        actions = np.concatenate([np.asarray(ep.get_actions()) for ep in chunks])
        assert np.abs(actions).max() <= 2.0 and (np.abs(actions) == 2.0).any()
        for ep in chunks:
            outs = ep.extra_model_outputs
            np.testing.assert_allclose(
                np.asarray(dist.logp(jnp.asarray(outs["action_dist_inputs"]),
                                     jnp.asarray(ep.get_actions()))),
                outs["action_logp"], rtol=1e-5, atol=1e-5)
        learner = algo.train()["learners"]["default_policy"]
        assert learner["clip_fraction"] == 0.0 and abs(learner["mean_kl_loss"]) < 1e-6
    finally:
        algo.stop()
