"""The MuJoCo data sets made here: a tiny SAC run on Hopper-v5 behind `random`, `medium-replay`
and `medium-expert` sets of a few hundred steps; their dataset.json, the behaviour's
`action_logp` and `action_dist_inputs` on every step, `terminated` and `truncated` as the env
said, D4RL's normalization, the CLI, Minari export, and each offline algorithm training a few
hundred updates on the data (slow)."""

import importlib.util
import json
import subprocess
import sys

import gymnasium as gym
import jax
import numpy as np
import pytest

from rljax_offline.apps.mujoco_datasets import RECIPES, normalized_score, read_meta, recipe
from rljax_offline.errors import OutputExistsError, UsageError

SMALL = {"env_steps": 400, "num_steps": 300, "eval_episodes": 3, "num_envs": 4}
REQUIRED = {"env_id", "kind", "seed", "num_episodes", "num_steps", "ref_min_score",
            "ref_max_score", "behavior", "recipe_version"}


def test_names_follow_the_recipes_and_d4rl():
    assert len(RECIPES) == 15
    assert recipe("hopper-medium-replay").env_id == "Hopper-v5"
    assert recipe("walker2d-medium-expert").kind == "medium-expert"
    with pytest.raises(UsageError, match="unknown MuJoCo data set 'hopper-v5'.*hopper-medium"):
        recipe("hopper-v5")


def test_normalized_score_is_d4rls():
    meta = {"name": "x", "ref_min_score": -20.0, "ref_max_score": 180.0}
    assert normalized_score(-20.0, meta) == 0.0
    assert normalized_score(180.0, meta) == 100.0
    np.testing.assert_allclose(normalized_score(np.array([30.0, 80.0]), meta), [25.0, 50.0])
    with pytest.raises(UsageError, match="ref_max_score 1.0 <= ref_min_score 2.0"):
        normalized_score(0.0, {"name": "x", "ref_min_score": 2.0, "ref_max_score": 1.0})


HAS_MUJOCO = importlib.util.find_spec("mujoco") is not None
mujoco_required = pytest.mark.skipif(not HAS_MUJOCO,
                                     reason="needs MuJoCo (pip install 'rljax-offline[mujoco]')")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Three tiny Hopper sets from one cached SAC run (the second and third reuse it)."""
    if not HAS_MUJOCO:
        pytest.skip("needs MuJoCo")
    from rljax_offline.apps.mujoco_record import make_dataset

    root = tmp_path_factory.mktemp("mujoco")
    out = {}
    for kind in ("random", "medium-replay", "medium-expert"):
        out[kind] = str(root / kind)
        make_dataset(f"hopper-{kind}", out[kind], cache_dir=str(root / "cache"), seed=3,
                     **SMALL)
    return root, out


def healthy(env, obs) -> bool:
    """Hopper-v5's own health rule on a state set from the observation (qpos without x)."""
    u = env.unwrapped
    nq = u.model.nq
    u.set_state(np.concatenate([[0.0], obs[:nq - 1]]), obs[nq - 1:])
    return bool(u.is_healthy)


@mujoco_required
def test_dataset_json_and_columns(made):
    from rljax_offline.data import read_episodes

    _, out = made
    mujoco = pytest.importorskip("mujoco")
    env = gym.make("Hopper-v5")
    for kind, path in out.items():
        meta = read_meta(path)
        assert REQUIRED <= set(meta), REQUIRED - set(meta)
        # What made the set and its SAC run: the versions a remade set is compared by.
        for made_with in (meta["made_with"], meta["sac"]["made_with"]):
            assert made_with["packages"]["jax"] == jax.__version__
            assert made_with["packages"]["mujoco"] == mujoco.__version__ and made_with["cpu"]
        eps = read_episodes(path)
        assert meta["kind"] == kind and meta["env_id"] == "Hopper-v5" and meta["seed"] == 3
        assert meta["num_episodes"] == len(eps) and meta["num_steps"] == sum(map(len, eps))
        if kind != "medium-replay":  # whole episodes up to the size, at most one more
            assert 300 <= meta["num_steps"] < 300 + max(map(len, eps))
        if meta["ref_max_score"] > meta["ref_min_score"]:
            assert meta["normalized_return_mean"] == normalized_score(meta["return_mean"], meta)
        else:  # a few hundred SAC steps may learn nothing: said, and no score is made up
            assert "normalized_return_mean" not in meta
            assert any("no better than the random policy" in n for n in meta["notes"])
            with pytest.raises(UsageError, match="never beat the random policy"):
                normalized_score(meta["return_mean"], meta)
        np.testing.assert_allclose(meta["return_mean"], np.mean([e.get_return() for e in eps]))
        for ep in eps:
            n = len(ep)
            logp = np.asarray(ep.extra_model_outputs["action_logp"])
            inputs = np.asarray(ep.extra_model_outputs["action_dist_inputs"])
            assert logp.shape == (n,) and inputs.shape == (n, 6)
            assert np.isfinite(logp).all() and np.isfinite(inputs).all()
            assert ep.is_terminated != ep.is_truncated
            # terminated exactly where Hopper became unhealthy, truncated at its time limit
            obs = np.asarray(ep.get_observations())
            assert all(healthy(env, o) for o in obs[:-1])
            assert healthy(env, obs[-1]) == ep.is_truncated
            assert ep.is_terminated or n == env.spec.max_episode_steps
        if kind == "random":  # uniform on [-1, 1]^3: density 1/8
            logp = np.concatenate([e.extra_model_outputs["action_logp"] for e in eps])
            np.testing.assert_allclose(logp, -3 * np.log(2.0), rtol=1e-6)
    behaviors = read_meta(out["medium-expert"])["episodes_by_behavior"]
    assert sorted(b.split("@")[0] for b in behaviors) == ["sac-expert", "sac-medium"]


@mujoco_required
def test_medium_replay_is_the_learners_episodes_up_to_the_medium_checkpoint(made):
    from rljax_offline.apps.mujoco_policies import BehaviorRun
    from rljax_offline.data import read_episodes

    root, out = made
    (run_path,) = [p for p in (root / "cache").iterdir()]
    with open(run_path / "behavior.json") as f:
        run = BehaviorRun(**json.load(f))
    meta = read_meta(out["medium-replay"])
    assert meta["num_steps"] <= run.medium["env_steps"]
    assert meta["sac"]["medium"]["env_steps"] == run.medium["env_steps"]
    learner = read_episodes(run.replay_files("medium"))
    assert [e.get_return() for e in read_episodes(out["medium-replay"])] == (
        [e.get_return() for e in learner if e.is_done])
    assert meta["ref_max_score"] == run.expert_return


@mujoco_required
def test_cli_lists_and_refuses_an_existing_output(made, tmp_path):
    listed = subprocess.run([sys.executable, "-m", "rljax_offline.cli", "datasets", "list"],
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    names = [json.loads(line)["dataset"] for line in listed.stdout.splitlines()]
    assert [n for n in names if n in RECIPES] == list(RECIPES)  # then the mpe2 sets
    from rljax_offline.apps.mujoco_record import make_dataset

    with pytest.raises(OutputExistsError, match="not an empty folder"):
        make_dataset("hopper-random", made[1]["random"], **SMALL)
    # `make` through the CLI, on the fixture's cached SAC run: the same data as the API's
    out = tmp_path / "cli"
    done = subprocess.run(
        [sys.executable, "-m", "rljax_offline.cli", "datasets", "make", "hopper-random",
         "--output", str(out), "--cache-dir", str(made[0] / "cache"), "--seed", "3", "--quiet",
         *(f"--{k.replace('_', '-')}={v}" for k, v in SMALL.items())],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout.splitlines()[-1])
    assert printed["num_steps"] == read_meta(made[1]["random"])["num_steps"]
    assert printed["ref_max_score"] == read_meta(made[1]["random"])["ref_max_score"]


@mujoco_required
def test_minari_export_round_trip(made, tmp_path, monkeypatch):
    pytest.importorskip("minari")
    from rljax_offline.data import read_episodes
    from rljax_offline.data.minari import iter_minari_episodes, write_minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    eps = read_episodes(made[1]["random"])
    write_minari(eps, "rljax/hopper-random-v0", env="Hopper-v5")
    back = list(iter_minari_episodes("minari:rljax/hopper-random-v0"))
    assert len(back) == len(eps)
    for a, b in zip(eps, back):
        np.testing.assert_array_equal(a.get_observations(), b.get_observations())
        np.testing.assert_array_equal(a.get_actions(), b.get_actions())
        assert (a.is_terminated, a.is_truncated) == (b.is_terminated, b.is_truncated)


@pytest.mark.slow
@mujoco_required
@pytest.mark.parametrize("algo", ["bc", "cql", "iql", "td3_bc"])
def test_each_algorithm_trains_on_the_data(made, algo):
    from rljax_offline.algorithms.registry import config_class

    path = made[1]["medium-replay"]
    config = (config_class(algo)().environment("Hopper-v5").offline_data(input_=path)
              .training(num_updates_per_iteration=100, train_batch_size_per_learner=64)
              .rl_module(model_config={"fcnet_hiddens": [32, 32]})
              .evaluation(evaluation_interval=2, evaluation_duration=2)
              .debugging(seed=0))
    algo_ = config.build()
    try:
        for _ in range(2):
            result = algo_.train()
    finally:
        algo_.stop()
    ret = result["evaluation"]["env_runners"]["episode_return_mean"]
    assert np.isfinite(ret)
    losses = {k: v for k, v in result["learners"]["default_policy"].items()
              if "loss" in k}
    assert losses and all(np.isfinite(v) for v in losses.values()), losses



@pytest.mark.slow
@mujoco_required
@pytest.mark.parametrize("env", ["halfcheetah", "walker2d"])
def test_the_other_envs_make_their_sets(env, tmp_path):
    from rljax_offline.apps.mujoco_record import make_dataset
    from rljax_offline.data import read_episodes

    meta = make_dataset(f"{env}-random", str(tmp_path / "d"), cache_dir=str(tmp_path / "c"),
                        env_steps=200, num_steps=200, eval_episodes=2, num_envs=2)
    eps = read_episodes(str(tmp_path / "d"))
    assert meta["env_id"] == recipe(f"{env}-random").env_id and len(eps) == meta["num_episodes"]
    assert all(e.extra_model_outputs["action_dist_inputs"].shape == (len(e), 12) for e in eps)
    if env == "halfcheetah":  # HalfCheetah never terminates: every episode is truncated
        assert all(e.is_truncated and len(e) == 1000 for e in eps)
