"""A trained policy without an `Algorithm`: `load_policy(checkpoint)` gives the networks,
params, pipelines and fitted state of any checkpoint (the earlier folder layout too), and
recording, export and `ope.estimate` run from it without building the algorithm. A PPO
checkpoint is judged from logged data (OPE no longer runs PPO's GAE piece, which reads the
value network), and WIS of a greedy target that no episode follows is ESS 0 with a
`ZeroImportanceWeightsWarning`, never a silent nan."""

import os
import shutil
import warnings

import jax
import numpy as np
import pytest

from rljax_offline import BCConfig, PPOConfig, ope
from rljax_offline.acting.recording import record_policy
from rljax_offline.algorithms.algorithm import Algorithm
from rljax_offline.errors import ZeroImportanceWeightsWarning
from rljax_offline.export import export_policy, load_stablehlo, policy_parts
from rljax_offline.learning.trained_policy import TrainedPolicy, load_policy
from rljax_offline.ope.estimators import EpisodeArrays, summarize

SMALL = {"fcnet_hiddens": [16]}
FAST_FQE = {"type": "fqe", "num_updates": 30, "model_config": SMALL}


@pytest.fixture(scope="module")
def ppo(tmp_path_factory):
    """A PPO checkpoint after one small iteration on CartPole, and the algorithm."""
    path = str(tmp_path_factory.mktemp("ppo") / "ckpt")
    algo = (PPOConfig().environment("CartPole-v1")
            .env_runners(num_envs_per_env_runner=4)
            .training(train_batch_size_per_learner=256, minibatch_size=128, num_epochs=1)
            .rl_module(model_config=SMALL).build())
    algo.train()
    algo.save(path)
    yield path, algo
    algo.stop()


@pytest.fixture()
def no_algorithm(monkeypatch):
    """Building any `Algorithm` fails the test."""
    def refuse(self, *args, **kwargs):
        raise AssertionError("an Algorithm was built")
    monkeypatch.setattr(Algorithm, "__init__", refuse)


@pytest.fixture(scope="module")
def logged(ppo, tmp_path_factory):
    """Episodes of the PPO policy's own action distribution, with `action_logp`."""
    out = str(tmp_path_factory.mktemp("logged") / "data")
    record_policy("CartPole-v1", ppo[0], out, num_episodes=24, explore=True, num_envs=4,
                  progress=False)
    return out


def test_load_policy_gives_the_checkpoints_params_without_an_algorithm(ppo, no_algorithm):
    path, algo = ppo
    policy = load_policy(path)
    assert isinstance(policy, TrainedPolicy) and policy.algo_name == "ppo"
    want = jax.device_get(algo.state.params)
    assert jax.tree_util.tree_structure(policy.params) == jax.tree_util.tree_structure(want)
    for a, b in zip(jax.tree_util.tree_leaves(policy.params), jax.tree_util.tree_leaves(want)):
        np.testing.assert_array_equal(a, b)
    assert policy.acting is not None and "value" in policy.params


def test_the_earlier_checkpoint_layout_loads_too(ppo, tmp_path, no_algorithm):
    path, _ = ppo
    generation = sorted(d for d in os.listdir(path) if d.startswith("gen-"))[-1]
    old = tmp_path / "old"
    old.mkdir()
    for name in ("state.msgpack", "meta.json"):  # no manifest, no generations
        shutil.copy(os.path.join(path, generation, name), old / name)
    a, b = load_policy(path), load_policy(str(old))
    for x, y in zip(jax.tree_util.tree_leaves(a.params), jax.tree_util.tree_leaves(b.params)):
        np.testing.assert_array_equal(x, y)


def test_ope_of_a_ppo_checkpoint_on_logged_data(ppo, logged, no_algorithm):
    """Once a raw ValueError from PPO's GAE piece: OPE built the algorithm and ran its whole
    learner pipeline. Judged on its own logged action distribution, the importance weights
    are all 1 (up to float32 rounding): IS and WIS equal the behaviour's value."""
    methods = {"is": {"type": "is"}, "wis": {"type": "wis"}, "fqe": FAST_FQE,
               "dr": {**FAST_FQE, "type": "dr"}}
    est = ope.estimate(ppo[0], logged, methods=methods, gamma=0.95, num_bootstrap=20)
    assert set(est) == set(methods)
    for name in ("is", "wis"):
        e = est[name]
        assert e["v_target"] == pytest.approx(e["v_behavior"], rel=1e-4), name
        assert e["ess"] == pytest.approx(24, rel=1e-3)
    assert np.isfinite(est["fqe"]["v_target"]) and np.isfinite(est["dr"]["v_target"])


def test_wis_of_a_greedy_target_that_no_episode_follows_warns(ppo, logged, no_algorithm):
    with pytest.warns(ZeroImportanceWeightsWarning, match="effective sample size 0"):
        est = ope.estimate(ppo[0], logged, methods=["wis"], explore=False, gamma=0.95,
                           num_bootstrap=10)
    assert est["wis"]["ess"] == 0.0 and np.isnan(est["wis"]["v_target"])


def test_zero_weights_warn_and_a_surviving_weight_does_not():
    e, t = 3, 4
    arrays = EpisodeArrays(rewards=np.ones((e, t)), mask=np.ones((e, t)),
                           logp_behavior=np.full((e, t), np.log(0.5)),
                           logp_target=np.full((e, t), -np.inf), q=np.zeros((e, t)),
                           v=np.zeros((e, t)))
    with pytest.warns(ZeroImportanceWeightsWarning, match="all|every one of the 3"):
        out = summarize("wis", arrays, 0.9, num_bootstrap=5)
    assert out["ess"] == 0.0 and np.isnan(out["v_target"])
    follows = arrays._replace(logp_target=np.where(np.arange(e)[:, None] == 0, 0.0, -np.inf)
                              * np.ones((e, t)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ZeroImportanceWeightsWarning)
        out = summarize("wis", follows, 0.9, num_bootstrap=5)
    assert out["ess"] == pytest.approx(1.0) and np.isfinite(out["v_target"])


@pytest.fixture(scope="module")
def bc_checkpoint(tmp_path_factory):
    """A BC checkpoint (module scope: built before `no_algorithm` forbids building)."""
    path = str(tmp_path_factory.mktemp("bc") / "ckpt")
    algo = BCConfig().environment("CartPole-v1").rl_module(model_config=SMALL).build()
    algo.save(path)
    algo.stop()
    return path


def test_record_and_export_from_a_checkpoint_without_an_algorithm(bc_checkpoint, tmp_path,
                                                                  no_algorithm):
    policy = load_policy(bc_checkpoint)
    files = record_policy("CartPole-v1", bc_checkpoint, str(tmp_path / "rec"), num_episodes=2,
                          num_envs=2, progress=False)
    assert files
    out = export_policy(policy_parts(policy), str(tmp_path / "policy.stablehlo"))
    actions, _ = load_stablehlo(out)(np.zeros((3, 4), np.float32))
    assert np.shape(actions) == (3,)


def test_an_algorithm_gives_its_trained_policy():
    algo = BCConfig().environment("CartPole-v1").rl_module(model_config=SMALL).build()
    policy = algo.policy()
    assert policy.algo_name == "bc" and policy.spaces == algo.spaces
    np.testing.assert_array_equal(
        jax.tree_util.tree_leaves(policy.params)[0],
        jax.tree_util.tree_leaves(jax.device_get(algo.state.params))[0])
    algo.stop()
