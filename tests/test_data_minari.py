"""Minari datasets in and out: made by Minari's own DataCollector (no downloads), read as
Episodes, converted through the CLI, trained on, and written back for `minari.load_dataset`."""

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

minari = pytest.importorskip("minari")
# Minari nags about metadata (author, description, env spec) a test data set does not need.
pytestmark = pytest.mark.filterwarnings("ignore:.*(is set to None|env_spec is None):UserWarning")

from rljax_offline import Episode  # noqa: E402
from rljax_offline.acting.experts import cartpole_expert  # noqa: E402
from rljax_offline.data import OfflineDataError, iter_episodes, read_episodes  # noqa: E402
from rljax_offline.data.convert import convert_minari  # noqa: E402
from rljax_offline.data.minari import minari_spaces, write_minari  # noqa: E402


class StepInfo(gym.Wrapper):
    """Adds simple numeric infos, so that their round trip is tested."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._t = 0
        return obs, {**info, "t": np.int64(0), "x": np.float32(obs[0])}

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        self._t += 1
        return obs, r, term, trunc, {**info, "t": np.int64(self._t), "x": np.float32(obs[0])}


@pytest.fixture()
def minari_root(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    return tmp_path / "minari"


def collect(dataset_id, episodes=6, expert=True, max_steps=120, data_format=None):
    """A CartPole dataset recorded through `minari.DataCollector`; returns Minari's episodes."""
    env = gym.make("CartPole-v1", max_episode_steps=max_steps)
    kwargs = {"data_format": data_format} if data_format else {}
    env = minari.DataCollector(StepInfo(env), record_infos=True, **kwargs)
    for seed in range(episodes):
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            action = int(cartpole_expert(obs)) if expert else env.action_space.sample()
            obs, _, term, trunc, _ = env.step(action)
            done = term or trunc
    env.create_dataset(dataset_id, algorithm_name="scripted expert")
    env.close()
    return list(minari.load_dataset(dataset_id).iterate_episodes())


@pytest.mark.parametrize("data_format", ["hdf5", "arrow"])
def test_read_minari_keeps_steps_flags_spaces_and_infos(minari_root, data_format):
    if data_format == "hdf5":
        pytest.importorskip("h5py")
    theirs = collect("cartpole/random-v0", episodes=5, expert=False, data_format=data_format)
    ours = read_episodes("minari:cartpole/random-v0")
    assert len(ours) == len(theirs) == 5
    for ep, ref in zip(ours, theirs):
        assert len(ep) == len(ref.rewards)
        np.testing.assert_array_equal(ep.observations, ref.observations)
        np.testing.assert_array_equal(ep.actions, ref.actions)
        np.testing.assert_array_equal(ep.rewards, ref.rewards)
        assert ep.terminated == bool(ref.terminations[-1])
        assert ep.truncated == bool(ref.truncations[-1])
        assert [int(i["t"]) for i in ep.infos] == list(range(len(ep) + 1))
        assert ep.infos[3]["x"] == pytest.approx(float(ep.observations[3][0]))
    obs_space, act_space = minari_spaces("minari:cartpole/random-v0")
    assert ours[0].observation_space == obs_space == gym.make("CartPole-v1").observation_space
    assert act_space == gym.spaces.Discrete(2)
    # A path works as well as an id, and streaming splits episodes across processes.
    path = str(minari_root / "cartpole" / "random-v0")
    assert len(read_episodes(f"minari:{path}")) == 5
    shares = [list(iter_episodes("minari:cartpole/random-v0", process_index=i,
                                 process_count=2)) for i in range(2)]
    assert sorted(ep.id_ for s in shares for ep in s) == sorted(ep.id_ for ep in ours)


def test_truncated_episodes_come_back_truncated(minari_root):
    theirs = collect("cartpole/expert-v0", episodes=3, max_steps=50)
    ours = read_episodes("minari:cartpole/expert-v0")
    assert all(ep.truncated and not ep.terminated and len(ep) == 50 for ep in ours)
    assert sum(len(e.rewards) for e in theirs) == 150


def test_our_episodes_written_as_minari_load_with_the_same_data(minari_root):
    collect("cartpole/source-v0", episodes=4, expert=False)
    ours = read_episodes("minari:cartpole/source-v0")
    write_minari(ours, "minari:cartpole/copy-v0", env="CartPole-v1")
    ds = minari.load_dataset("cartpole/copy-v0")
    assert ds.total_episodes == 4 and ds.total_steps == sum(len(e) for e in ours)
    assert ds.recover_environment().spec.id == "CartPole-v1"
    for ep, ref in zip(ours, ds.iterate_episodes()):
        np.testing.assert_array_equal(ref.observations, ep.observations)
        np.testing.assert_array_equal(ref.actions, ep.actions)
        np.testing.assert_array_equal(ref.rewards, ep.rewards)
        assert bool(ref.terminations[-1]) == ep.terminated
        np.testing.assert_array_equal(ref.infos["t"], np.arange(len(ep) + 1))


def test_lookback_buffers_are_not_written(minari_root):
    ep = Episode(observations=np.arange(12.0).reshape(6, 2).astype(np.float32),
                 actions=np.arange(5) % 2, rewards=np.arange(5.0), len_lookback_buffer=2,
                 terminated=True)
    space = gym.spaces.Box(-100, 100, (2,), np.float32)
    write_minari([ep], "toy/lookback-v0", observation_space=space,
                 action_space=gym.spaces.Discrete(2))
    ref = next(minari.load_dataset("toy/lookback-v0").iterate_episodes())
    np.testing.assert_array_equal(ref.observations, ep.get_observations())
    np.testing.assert_array_equal(ref.rewards, [2.0, 3.0, 4.0])
    assert ref.terminations.tolist() == [False, False, True]


def test_writing_infos_that_change_keys_drops_them_with_a_warning(minari_root):
    collect("cartpole/src-v0", episodes=1, expert=False)
    (ep,) = read_episodes("minari:cartpole/src-v0")
    infos = list(ep.infos)
    infos[1] = {"other": 1.0}
    with pytest.warns(UserWarning, match="infos dropped"):
        write_minari([ep.replace(infos=infos)], "cartpole/noinfo-v0")
    ref = next(minari.load_dataset("cartpole/noinfo-v0").iterate_episodes())
    assert not ref.infos
    np.testing.assert_array_equal(ref.observations, ep.observations)


class DictObs(gym.ObservationWrapper):
    """CartPole with a Dict observation space (nested data must survive both ways)."""

    def __init__(self, env):
        super().__init__(env)
        box = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.observation_space = gym.spaces.Dict({"pos": box, "vel": box})

    def observation(self, o):
        return {"pos": o[[0, 2]].astype(np.float32), "vel": o[[1, 3]].astype(np.float32)}


def test_dict_observations_round_trip_and_convert_to_episode_rows(minari_root, tmp_path):
    env = minari.DataCollector(DictObs(gym.make("CartPole-v1")), data_format="arrow")
    for seed in range(3):
        env.reset(seed=seed)
        done = False
        while not done:
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            done = term or trunc
    env.create_dataset("cartpole/dict-v0")
    ours = read_episodes("minari:cartpole/dict-v0")
    assert isinstance(ours[0].observation_space, gym.spaces.Dict)
    write_minari(ours, "cartpole/dictcopy-v0")
    for ep, ref in zip(ours, minari.load_dataset("cartpole/dictcopy-v0").iterate_episodes()):
        for key in ("pos", "vel"):
            np.testing.assert_array_equal(ref.observations[key], ep.observations[key])
    files = convert_minari("minari:cartpole/dict-v0", str(tmp_path / "eps"), to="episodes")
    back = read_episodes(files)
    assert [len(e) for e in back] == [len(e) for e in ours]
    np.testing.assert_array_equal(back[0].observations["vel"], ours[0].observations["vel"])


def test_infos_one_per_step_get_an_empty_reset_info(minari_root):
    """Older HDF5 data sets hold one info per step, none for the reset."""
    pytest.importorskip("h5py")
    from minari.data_collector.episode_buffer import EpisodeBuffer

    obs = np.zeros((4, 2), np.float32)
    buffer = EpisodeBuffer(id=0, observations=obs, actions=np.array([0, 1, 0]),
                           rewards=np.ones(3), terminations=np.array([False, False, True]),
                           truncations=np.zeros(3, bool), infos={"k": [1, 2, 3]})
    minari.create_dataset_from_buffers(
        "toy/stepinfos-v0", [buffer], observation_space=gym.spaces.Box(-1, 1, (2,)),
        action_space=gym.spaces.Discrete(2), data_format="hdf5")
    (ep,) = read_episodes("minari:toy/stepinfos-v0")
    assert ep.infos[0] == {} and [int(i["k"]) for i in ep.infos[1:]] == [1, 2, 3]


def test_observation_space_mismatch_is_a_clear_error(minari_root):
    collect("cartpole/small-v0", episodes=1, expert=False)
    with pytest.raises(OfflineDataError, match="observation space"):
        read_episodes("minari:cartpole/small-v0",
                      observation_space=gym.spaces.Box(-1, 1, (5,), np.float32))
    # Same shapes and dtypes, other bounds: accepted.
    assert read_episodes("minari:cartpole/small-v0",
                         observation_space=gym.spaces.Box(-9, 9, (4,), np.float32))


def test_missing_dataset_is_a_clear_error(minari_root):
    with pytest.raises(OfflineDataError, match="MINARI_DATASETS_PATH"):
        read_episodes("minari:nothing/here-v0")


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "rljax_offline.cli", *args], env=env,
                          capture_output=True, text=True, timeout=600)


def last_json(out):
    return json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])


@pytest.mark.slow
def test_cli_converts_a_datacollector_dataset_both_ways_and_trains_bc(minari_root, tmp_path):
    import os

    theirs = collect("cartpole/expert-v1", episodes=12, max_steps=200)
    steps = sum(len(e.rewards) for e in theirs)
    env = dict(os.environ)
    out = cli("inspect", "--input", "minari:cartpole/expert-v1", env=env)
    assert out.returncode == 0, out.stderr
    info = last_json(out)
    assert (info["episodes"], info["timesteps"], info["env_id"]) == (12, steps, "CartPole-v1")

    parquet = tmp_path / "episodes"
    out = cli("convert", "--input", "minari:cartpole/expert-v1", "--output", str(parquet),
              "--to", "episodes", env=env)
    assert out.returncode == 0, out.stderr
    info = last_json(cli("inspect", "--input", str(parquet), env=env))
    assert (info["episodes"], info["timesteps"]) == (12, steps)

    out = cli("convert", "--input", str(parquet), "--output", "minari:cartpole/back-v0",
              "--to", "minari", "--env", "CartPole-v1", env=env)
    assert out.returncode == 0, out.stderr
    back = minari.load_dataset("cartpole/back-v0")
    assert (back.total_episodes, back.total_steps) == (12, steps)

    run = tmp_path / "run"
    out = cli("train", "--input", "minari:cartpole/expert-v1", "--iterations", "2",
              "--updates-per-iteration", "100", "--batch-size", "256", "--hiddens", "64",
              "--eval-episodes", "4", "--out", str(run), "--quiet", env=env)
    assert out.returncode == 0, out.stderr
    summary = last_json(out)
    assert summary["iterations"] == 2 and summary["best_return"] > 100
