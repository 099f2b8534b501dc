"""Box actions outside the space's bounds are data (RLlib records a Gaussian policy's sampled,
unclipped actions): every read path accepts them, `inspect` counts them, and no algorithm's
loss turns NaN or inf on them. NaN / inf / wrong shapes / Discrete out of range stay errors."""

import json
import os
import subprocess
import sys

import gymnasium as gym
import msgpack
import msgpack_numpy
import numpy as np
import pyarrow.parquet as pq
import pytest

from rljax_offline import BCConfig, CQLConfig, IQLConfig, MARWILConfig, PPOConfig
from rljax_offline.data import inspect_dataset, iter_episodes, read_episodes
from rljax_offline.data.writer import EpisodeWriter
from rljax_offline.episode.builder import EpisodeBuilder
from rljax_offline.errors import OfflineDataError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = {"fcnet_hiddens": [16]}
EPISODES, STEPS = 4, 40


def record_unclipped_pendulum(seed=0):
    """A Gaussian policy (std 1.5 around a linear controller) on Pendulum, recorded as RLlib's
    EnvRunner does: the env gets the clipped action, the episode keeps the sampled one."""
    env = gym.make("Pendulum-v1", max_episode_steps=STEPS)
    rng = np.random.default_rng(seed)
    episodes = []
    for i in range(EPISODES):
        b = EpisodeBuilder(observation_space=env.observation_space,
                           action_space=env.action_space)
        obs, _ = env.reset(seed=seed + i)
        b.add_env_reset(obs)
        done = False
        while not done:
            mean = np.array([-2.0 * obs[1] - 0.5 * obs[2]], np.float32)
            action = (mean + 1.5 * rng.standard_normal(1)).astype(np.float32)
            obs, r, term, trunc, _ = env.step(np.clip(action, -2.0, 2.0))
            done = term or trunc
            b.add_env_step(obs, action, r, terminated=term, truncated=trunc,
                           extra_model_outputs={
                               "action_dist_inputs": np.concatenate(
                                   [mean, np.log([1.5]).astype(np.float32)])})
        episodes.append(b.finalize())
    return episodes


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory):
    path = tmp_path_factory.mktemp("pendulum_unclipped")
    episodes = record_unclipped_pendulum()
    with EpisodeWriter(str(path), rllib_layout=True, rllib_folders="PendulumEnv") as w:
        w.write_many(episodes)
    return str(path), episodes


def test_rllib_layout_pendulum_with_unclipped_actions_reads_back_exactly(pendulum):
    path, recorded = pendulum
    files = sorted(p for p in (os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs)
                   if p.endswith(".parquet"))
    table = pq.read_table(files[0])
    assert table.column_names == ["item"]  # RLlib's episode rows, msgpack-numpy blobs
    state = msgpack.unpackb(table.column("item")[0].as_py(), object_hook=msgpack_numpy.decode)
    assert isinstance(state, dict)
    actions = np.concatenate([ep.actions for ep in recorded])
    assert (np.abs(actions) > 2.0).mean() > 0.1  # many outside [-2, 2], as RLlib records
    for reader in (lambda: read_episodes(path), lambda: list(iter_episodes(path))):
        back = {ep.id_: ep for ep in reader()}
        assert len(back) == EPISODES
        for ep in recorded:
            np.testing.assert_array_equal(back[ep.id_].actions, ep.actions)
            np.testing.assert_array_equal(back[ep.id_].observations, ep.observations)
            np.testing.assert_array_equal(back[ep.id_].rewards, ep.rewards)


def test_inspect_reports_actions_outside_the_bounds(pendulum):
    path, recorded = pendulum
    actions = np.concatenate([ep.actions for ep in recorded])[:, 0]
    expected_steps = int((np.abs(actions) > 2.0).sum())
    expected_far = float(np.max(np.abs(actions)) - 2.0)
    info = inspect_dataset(path)["actions_outside_bounds"]["actions"]
    assert info["steps"] == expected_steps
    assert info["fraction"] == pytest.approx(expected_steps / len(actions))
    assert info["max_distance"] == pytest.approx(expected_far, rel=1e-6)
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-m", "rljax_offline.cli", "inspect", "--input", path],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    line = [x for x in out.stdout.splitlines() if x.startswith("{")][-1]
    assert json.loads(line)["actions_outside_bounds"]["actions"]["steps"] == expected_steps


def test_tabular_rows_keep_unclipped_actions(pendulum, tmp_path):
    _, recorded = pendulum
    with EpisodeWriter(str(tmp_path), output_write_episodes=False) as w:
        w.write_many(recorded)
    back = read_episodes(str(tmp_path), input_read_episodes=False,
                         action_space=gym.spaces.Box(-2, 2, (1,), np.float32))
    np.testing.assert_array_equal(np.concatenate([ep.actions for ep in back]),
                                  np.concatenate([ep.actions for ep in recorded]))


@pytest.mark.parametrize("bad, message", [
    (np.nan, "NaN"), (np.inf, "inf")])
def test_nan_and_inf_actions_stay_named_errors(pendulum, tmp_path, bad, message):
    ep = pendulum[1][0]
    actions = np.array(ep.actions)
    actions[3] = bad
    with EpisodeWriter(str(tmp_path)) as w:
        w.write(ep.replace(actions=actions))
    with pytest.raises(OfflineDataError, match=message):
        read_episodes(str(tmp_path))


@pytest.mark.parametrize("make", [BCConfig, MARWILConfig, CQLConfig, IQLConfig])
def test_losses_stay_finite_on_actions_outside_the_bounds(pendulum, make):
    path, _ = pendulum
    algo = (make().environment("Pendulum-v1").offline_data(input_=path)
            .training(train_batch_size_per_learner=64, num_updates_per_iteration=20)
            .rl_module(model_config=SMALL)).build()
    result = algo.train()["learners"]["default_policy"]
    algo.stop()
    losses = {k: v for k, v in result.items() if "loss" in k}
    assert losses and all(np.isfinite(v) for v in losses.values()), result


def test_ppo_fine_tunes_on_actions_outside_the_bounds(pendulum, tmp_path):
    path, _ = pendulum
    bc = (BCConfig().environment("Pendulum-v1").offline_data(input_=path)
          .training(train_batch_size_per_learner=64, num_updates_per_iteration=5)
          .rl_module(model_config=SMALL)).build()
    bc.train()
    bc.save(str(tmp_path / "bc"))
    bc.stop()
    ppo = (PPOConfig().environment("Pendulum-v1")
           .training(init_policy_from=str(tmp_path / "bc"), value_warmup_updates=20,
                     train_batch_size_per_learner=128, minibatch_size=64, num_epochs=1)).build()
    assert all(np.isfinite(v) for v in ppo.warmup_metrics.values()), ppo.warmup_metrics
    result = ppo.train()["learners"]["default_policy"]
    ppo.stop()
    assert all(np.isfinite(v) for k, v in result.items() if "loss" in k), result


def test_squashed_learners_clip_actions_just_inside_the_bounds(pendulum):
    import jax

    from rljax_offline.connectors import default_learner, pipeline
    from rljax_offline.connectors.learner import clip_actions_inside_bounds
    from rljax_offline.episode.batch import EpisodeBatch

    spaces = (gym.spaces.Box(-8, 8, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32))
    from rljax_offline import spaces as sp
    from rljax_offline.connectors.core import Spaces

    spaces = Spaces(sp.to_spec(gym.spaces.Box(-8, 8, (3,), np.float32)),
                    sp.to_spec(gym.spaces.Box(-2, 2, (1,), np.float32)))
    episodes = EpisodeBatch.from_episodes(pendulum[1])
    recorded = np.concatenate([ep.actions for ep in pendulum[1]])
    inside = np.abs(recorded) < 1.99
    pieces = {"piece": (clip_actions_inside_bounds(),)}
    for make in (CQLConfig(), IQLConfig()):
        spec = make.rl_module(model_config=SMALL).make_spec(*spaces)
        pieces[make.algo_name] = spec.data.learner_connector
    for name, extra in pieces.items():
        pipe = pipeline(default_learner(spaces), *extra)
        _, batch, _ = jax.jit(pipe.apply)(pipe.init(spaces), episodes, {})
        a = np.asarray(batch["actions"])[np.asarray(batch["loss_mask"])]
        assert a.max() < 2.0 and a.min() > -2.0 and a.max() > 2.0 - 1e-5, name
        np.testing.assert_array_equal(a[inside], recorded[inside])
