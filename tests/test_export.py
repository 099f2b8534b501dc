"""Exported policies (StableHLO, ONNX) act exactly as the JAX policy they came from."""

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from rljax_offline.acting.env_runner import EnvRunner, episode_stats, record_expert
from rljax_offline.algorithms.bc import BCConfig
from rljax_offline.connectors.mean_std import mean_std_filter
from rljax_offline.export import ExportError, load_stablehlo, signature_path

# float32 network outputs through a few layers: allow a few ulps of the outputs' scale.
F32_TOL = 64 * np.finfo(np.float32).eps


def _bc(tmp_path_factory, env, episodes, custom=None, updates=200):
    data = str(tmp_path_factory.mktemp(env))
    record_expert(env, data, num_episodes=episodes, num_envs=4, progress=False)
    config = (BCConfig().environment(env).offline_data(input_=data)
              .training(lr=1e-3, num_updates_per_iteration=updates,
                        train_batch_size_per_learner=256, learner_connector=custom)
              .rl_module(model_config={"fcnet_hiddens": [64, 64]})
              .evaluation(evaluation_interval=0))
    algo = config.build()
    algo.train()
    return algo


@pytest.fixture(scope="module")
def cartpole_bc(tmp_path_factory):
    algo = _bc(tmp_path_factory, "CartPole-v1", 8)
    yield algo
    algo.stop()


@pytest.fixture(scope="module")
def pendulum_filtered_bc(tmp_path_factory):
    algo = _bc(tmp_path_factory, "Pendulum-v1", 4,
               custom=lambda s: [mean_std_filter(as_learner_connector=True)], updates=20)
    yield algo
    algo.stop()


def _observations(space, n=1000, seed=0):
    space.seed(seed)
    return np.stack([space.sample() for _ in range(n)]).astype(np.float32)


def test_stablehlo_matches_the_jax_policy_with_a_frozen_filter(pendulum_filtered_bc, tmp_path):
    algo = pendulum_filtered_bc
    obs = _observations(algo._obs_space)
    path = algo.export_policy(str(tmp_path / "policy.stablehlo"))
    actions, dist_inputs = load_stablehlo(path)(obs)
    assert actions.shape == (1000, 1) and dist_inputs.shape == (1000, 2)
    reference = algo.compute_actions(obs)
    np.testing.assert_allclose(actions, reference, atol=F32_TOL * 2.0, rtol=F32_TOL)
    # Box actions are clipped into the space by the inlined module-to-env pipeline.
    assert np.all(np.abs(np.asarray(actions)) <= 2.0)
    # Any batch size: the batch dimension is symbolic.
    assert load_stablehlo(path)(obs[:3])[0].shape == (3, 1)


def test_stablehlo_reloads_with_plain_jax(cartpole_bc, tmp_path):
    path = cartpole_bc.export_policy(str(tmp_path / "policy.stablehlo"))
    code = ("import sys, jax, numpy as np\n"
            f"f = jax.export.deserialize(bytearray(open({path!r}, 'rb').read()))\n"
            "a, _ = f.call(np.zeros((5, 4), np.float32))\n"
            "assert a.shape == (5,) and 'rljax_offline' not in sys.modules\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_onnx_gives_the_jax_actions_on_1000_observations(pendulum_filtered_bc, cartpole_bc,
                                                         tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("jax2onnx")
    for name, algo in (("pendulum", pendulum_filtered_bc), ("cartpole", cartpole_bc)):
        obs = _observations(algo._obs_space)
        path = algo.export_policy(str(tmp_path / f"{name}.onnx"), format="onnx")
        session = ort.InferenceSession(path)
        assert [i.name for i in session.get_inputs()] == ["obs"]
        actions, dist_inputs = session.run(None, {"obs": obs})
        reference = algo.compute_actions(obs)
        ref_actions, ref_inputs = load_stablehlo(
            algo.export_policy(str(tmp_path / f"{name}.stablehlo")))(obs)
        np.testing.assert_allclose(dist_inputs, ref_inputs, atol=F32_TOL, rtol=F32_TOL)
        if name == "cartpole":
            assert actions.dtype.kind == "i"
            _agree_discrete_n(actions, reference, np.asarray(ref_inputs))
        else:
            np.testing.assert_allclose(actions, reference, atol=F32_TOL * 2.0, rtol=F32_TOL)


@pytest.mark.slow
def test_onnx_policy_plays_cartpole_as_well_as_the_jax_policy(cartpole_bc, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("jax2onnx")
    session = ort.InferenceSession(cartpole_bc.export_policy(str(tmp_path / "p.onnx"), "onnx"))
    runs = {}
    for name, policy in (("onnx", lambda obs: session.run(None, {"obs": obs.astype(
            np.float32)})[0]), ("jax", cartpole_bc.actor(explore=False))):
        runner = EnvRunner("CartPole-v1", policy, num_envs=4, seed=123)
        try:
            runs[name] = episode_stats(runner.sample(num_episodes=8))
        finally:
            runner.close()
    assert runs["onnx"]["episode_returns"] == runs["jax"]["episode_returns"]
    assert runs["jax"]["episode_return_mean"] > 150  # a trained policy, not a random one


def test_bad_format_is_a_clear_error(cartpole_bc):
    with pytest.raises(ExportError, match="format must be one of"):
        cartpole_bc.export_policy("x.bin", format="tflite")


def test_the_signature_sidecar_describes_act_of_obs(cartpole_bc, tmp_path):
    """Policies of the latest observation: `act(obs)`, no state, no `t` (frame stacking and
    recurrent policies: tests/test_export_stateful.py)."""
    path = cartpole_bc.export_policy(str(tmp_path / "p.stablehlo"))
    doc = json.load(open(signature_path(path)))
    assert doc["call"] == "act(obs)" and "initial_state" not in doc
    assert doc["inputs"] == [{"name": "obs", "shape": ["B", 4], "dtype": "float32"}]
    assert doc["outputs"] == [{"name": "actions", "shape": ["B"], "dtype": "int32"},
                              {"name": "action_dist_inputs", "shape": ["B", 2],
                               "dtype": "float32"}]


def test_discrete_observations_are_one_hot_encoded_inside_the_graph(tmp_path):
    """FrozenLake's integer observations go in raw (as int32: JAX's default int width)."""
    algo = BCConfig().environment("FrozenLake-v1").rl_module(
        model_config={"fcnet_hiddens": [16]}).build()
    obs = np.arange(16).repeat(3)
    reference = algo.compute_actions(obs)
    actions, dist_inputs = load_stablehlo(algo.export_policy(str(tmp_path / "fl.stablehlo")))(
        obs.astype(np.int32))
    _agree_discrete_n(actions, reference, np.asarray(dist_inputs))
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("jax2onnx")
    session = ort.InferenceSession(algo.export_policy(str(tmp_path / "fl.onnx"), "onnx"))
    onnx_actions, _ = session.run(None, {"obs": obs.astype(np.int32)})
    _agree_discrete_n(onnx_actions, reference, np.asarray(dist_inputs))


def _agree_discrete_n(actions, reference, logits):
    """Equal argmax actions wherever the top two logits are not within rounding of a tie."""
    top2 = np.sort(logits, -1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > F32_TOL * (1 + np.abs(logits).max(-1))
    np.testing.assert_array_equal(np.asarray(actions)[clear], np.asarray(reference)[clear])
    assert clear.mean() > 0.95  # near-ties are rare: the comparison covers nearly every row


class DictObs(gym.ObservationWrapper):
    """CartPole with Dict observations: the graph flattens them (the default connector)."""

    def __init__(self, env):
        super().__init__(env)
        box = gym.spaces.Box(-5, 5, (2,), np.float32)
        self.observation_space = gym.spaces.Dict({"pos": box, "vel": box})

    def observation(self, o):
        return {"pos": o[[0, 2]].astype(np.float32), "vel": o[[1, 3]].astype(np.float32)}


def test_dict_observations_export_as_one_input_per_key(tmp_path):
    algo = BCConfig().environment(lambda cfg: DictObs(gym.make("CartPole-v1"))).rl_module(
        model_config={"fcnet_hiddens": [16]}).build()
    algo._obs_space.seed(0)
    samples = [algo._obs_space.sample() for _ in range(200)]
    obs = {k: np.stack([o[k] for o in samples]) for k in ("pos", "vel")}
    reference = algo.compute_actions(obs)
    actions, dist_inputs = load_stablehlo(algo.export_policy(str(tmp_path / "d.stablehlo")))(obs)
    _agree_discrete_n(actions, reference, np.asarray(dist_inputs))
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("jax2onnx")
    session = ort.InferenceSession(algo.export_policy(str(tmp_path / "d.onnx"), "onnx"))
    assert [i.name for i in session.get_inputs()] == ["obs.pos", "obs.vel"]
    onnx_actions, _ = session.run(None, {"obs.pos": obs["pos"], "obs.vel": obs["vel"]})
    _agree_discrete_n(onnx_actions, reference, np.asarray(dist_inputs))
