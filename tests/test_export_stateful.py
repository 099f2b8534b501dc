"""Exported policies that carry something between steps (recurrent state, the previous action
and reward, past observations) act exactly as our own actor does, episode starts included.

Each test records episodes with the library's actor (`EnvRunner(env, algo.actor())`), then
replays their observations through the exported step the way a deployer runs it: a few envs
in lockstep, each playing two episodes back to back, the step's `state_out` fed back and, at
the second episode's start, `t = 0` with the stale state, previous action/reward and past
observations of the episode before (the graph must ignore them, as the actor does).
"""

import json

import numpy as np
import pytest

from rljax_offline.acting.env_runner import EnvRunner, record_expert
from rljax_offline.algorithms.bc import BCConfig
from rljax_offline.algorithms.iql import IQLConfig
from rljax_offline.algorithms.ppo.config import PPOConfig
from rljax_offline.connectors.common import frame_stack
from rljax_offline.export import ExportError, initial_state, load_stablehlo, signature_path

# float32 network outputs through a few layers: allow a few ulps of the outputs' scale.
F32_TOL = 64 * np.finfo(np.float32).eps
LANES, EPISODES_PER_LANE, MAX_STEPS = 3, 2, 40
LSTM_PREV = {"fcnet_hiddens": [16], "use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 8,
             "lstm_use_prev_action": True, "lstm_use_prev_reward": True}


@pytest.fixture(scope="module")
def cartpole_data(tmp_path_factory):
    data = str(tmp_path_factory.mktemp("cartpole"))
    record_expert("CartPole-v1", data, num_episodes=4, num_envs=4, progress=False)
    return data


@pytest.fixture(scope="module")
def lstm_bc(cartpole_data):
    """An LSTM policy reading the previous action and reward, trained a few updates."""
    algo = (BCConfig().environment("CartPole-v1").offline_data(input_=cartpole_data)
            .training(lr=1e-3, num_updates_per_iteration=5, train_batch_size_per_learner=128)
            .rl_module(model_config=LSTM_PREV).evaluation(evaluation_interval=0)).build()
    algo.train()
    yield algo
    algo.stop()


def _lanes(algo, env, lookback=0):
    """The actor's episodes laid out as the deployer's loop sees them: `[LANES, steps]` arrays
    of what goes into each step (the observation window oldest first, the previous action and
    reward and `t`), the actor's recorded actions and `action_dist_inputs`, and a mask of the
    real steps. Before an episode's first step the window, action and reward are the previous
    episode's (stale, as a deployer's buffers hold them)."""
    runner = EnvRunner(env, algo.actor(explore=False), num_envs=LANES, seed=11)
    try:
        episodes = runner.sample(num_episodes=LANES * EPISODES_PER_LANE)
    finally:
        runner.close()
    lanes = []
    for j in range(LANES):
        steps, window, prev_action, prev_reward = [], None, None, 7.0
        for ep in episodes[j::LANES][:EPISODES_PER_LANE]:
            n = min(len(ep), MAX_STEPS)
            obs = np.asarray(ep.get_observations(slice(0, n)), np.float32)
            actions = np.asarray(ep.get_actions(slice(0, n)))
            rewards = np.asarray(ep.get_rewards(slice(0, n)), np.float32)
            logits = np.asarray(ep.get_extra_model_outputs("action_dist_inputs", slice(0, n)))
            if window is None:  # stale values before the lane's first episode
                window = np.full((lookback + 1, *obs.shape[1:]), 3.0, np.float32)
                prev_action = np.ones_like(actions[0])
            for i in range(n):
                window = np.concatenate([window[1:], obs[i:i + 1]])
                steps.append((window.copy(), prev_action, prev_reward, i, actions[i], logits[i]))
                prev_action, prev_reward = actions[i], rewards[i]
        lanes.append(steps)
    T = max(len(s) for s in lanes)
    pad = tuple(np.zeros_like(x) for x in lanes[0][0])
    cols = list(zip(*[[*s, *[pad] * (T - len(s))] for s in lanes]))  # [T][LANES] of steps
    field = [np.stack([np.stack([step[k] for step in row]) for row in cols], axis=1)
             for k in range(6)]
    mask = np.array([[i < len(s) for i in range(T)] for s in lanes])
    window, prev_a, prev_r, t, ref_actions, ref_logits = field
    obs = window if lookback else window[:, :, -1]
    return dict(obs=obs, prev_actions=prev_a, prev_rewards=prev_r, t=t), ref_actions, \
        ref_logits, mask


def _as_signed(inputs, path):
    """The inputs in the dtypes the export's sidecar names (int32 actions and `t`, ...)."""
    doc = json.load(open(signature_path(path)))
    dtypes = {i["name"]: i["dtype"] for i in doc["inputs"]}
    return {k: v.astype(dtypes[k]) for k, v in inputs.items() if k in dtypes}


def _replay(step, inputs, names, state):
    """Steps `step` through the lanes' steps, feeding its state back; stacked outputs."""
    actions, logits = [], []
    for i in range(inputs["t"].shape[1]):
        x = {k: inputs[k][:, i] for k in names}
        if state is not None:
            x["state"] = state
        out = step(x)
        actions.append(np.asarray(out[0]))
        logits.append(np.asarray(out[1]))
        if state is not None:
            state = out[2]
    return np.stack(actions, 1), np.stack(logits, 1)


def _assert_acts_as_the_actor(actions, logits, ref_actions, ref_logits, mask):
    scale = 1.0 + np.abs(ref_logits[mask]).max()
    np.testing.assert_allclose(logits[mask], ref_logits[mask], atol=F32_TOL * scale, rtol=0)
    if ref_actions.dtype.kind == "f":  # Box: the mean, clipped into the bounds
        np.testing.assert_allclose(actions[mask], ref_actions[mask], atol=F32_TOL * scale,
                                   rtol=0)
        return
    top2 = np.sort(ref_logits[mask], -1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 2 * F32_TOL * scale  # not within rounding of a tie
    np.testing.assert_array_equal(actions[mask][clear], ref_actions[mask][clear])
    assert clear.mean() > 0.95


def _stale_state(path):
    """A state that is not the initial one: the graph must replace it at `t == 0`."""
    zeros = initial_state(path, LANES)
    return {k: np.full_like(v, 0.5) for k, v in zeros.items()}


def _onnx_lstm_step(session, names):
    """The ONNX session as a step like the StableHLO one: LSTM state `{c, h}` in and out."""
    def step(x):
        feed = {k: x[k] for k in names}
        feed.update({f"state.{k}": v for k, v in x["state"].items()})
        a, d, c, h = session.run(None, feed)
        return a, d, {"c": c, "h": h}

    return step


def test_lstm_with_previous_action_and_reward_steps_as_the_actor(lstm_bc, tmp_path):
    path = lstm_bc.export_policy(str(tmp_path / "lstm.stablehlo"))
    doc = json.load(open(signature_path(path)))
    assert [i["name"] for i in doc["inputs"]] == ["obs", "prev_actions", "prev_rewards",
                                                 "state.c", "state.h", "t"]
    assert [o["name"] for o in doc["outputs"]] == ["actions", "action_dist_inputs",
                                                  "state_out.c", "state_out.h"]
    assert doc["initial_state"]["leaves"][0]["shape"] == ["B", 8]
    zeros = initial_state(path, 5)
    assert set(zeros) == {"h", "c"} and zeros["h"].shape == (5, 8) and not zeros["h"].any()

    inputs, ref_actions, ref_logits, mask = _lanes(lstm_bc, "CartPole-v1")
    inputs = _as_signed(inputs, path)
    assert (inputs["t"][mask] == 0).sum() == LANES * EPISODES_PER_LANE  # resets mid-stream
    step = load_stablehlo(path)
    names = ("obs", "prev_actions", "prev_rewards", "t")
    actions, logits = _replay(step, inputs, names, _stale_state(path))
    _assert_acts_as_the_actor(actions, logits, ref_actions, ref_logits, mask)

    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("jax2onnx")
    session = ort.InferenceSession(lstm_bc.export_policy(str(tmp_path / "lstm.onnx"), "onnx"))
    assert [i.name for i in session.get_inputs()] == [i["name"] for i in doc["inputs"]]
    assert [o.name for o in session.get_outputs()] == [o["name"] for o in doc["outputs"]]

    actions, logits = _replay(_onnx_lstm_step(session, names), inputs, names,
                              _stale_state(path))
    _assert_acts_as_the_actor(actions, logits, ref_actions, ref_logits, mask)


def test_recurrent_ppo_exports_its_actor_part_and_steps_as_the_actor(tmp_path):
    """An (untrained) GRU PPO: the module's state is `{"actor": {h}, "critic": {h}}`; acting
    reads only the actor's, so that is what the step takes and returns."""
    algo = PPOConfig().environment("StatelessCartPole-v1").rl_module(model_config={
        "fcnet_hiddens": [8], "use_gru": True, "lstm_cell_size": 6, "max_seq_len": 8}).build()
    path = algo.export_policy(str(tmp_path / "gru.stablehlo"))
    doc = json.load(open(signature_path(path)))
    assert [i["name"] for i in doc["inputs"]] == ["obs", "state.h", "t"]
    assert [o["name"] for o in doc["outputs"]][2:] == ["state_out.h"]
    inputs, ref_actions, ref_logits, mask = _lanes(algo, "StatelessCartPole-v1")
    inputs = _as_signed(inputs, path)
    actions, logits = _replay(load_stablehlo(path), inputs, ("obs", "t"), _stale_state(path))
    _assert_acts_as_the_actor(actions, logits, ref_actions, ref_logits, mask)
    with pytest.raises(ValueError, match="pytree structure"):  # takes the dict, not obs
        load_stablehlo(path)(inputs["obs"][:, 0])


def test_box_actions_go_back_in_as_the_previous_action(tmp_path):
    """An (untrained) IQL LSTM on Pendulum reading its previous (float) action and reward: the
    step's actions are the clipped means the actor chose, through StableHLO and ONNX."""
    algo = IQLConfig().environment("Pendulum-v1").rl_module(model_config={
        **LSTM_PREV, "fcnet_hiddens": [8], "lstm_cell_size": 6}).build()
    path = algo.export_policy(str(tmp_path / "pendulum.stablehlo"))
    doc = json.load(open(signature_path(path)))
    assert {"name": "prev_actions", "shape": ["B", 1], "dtype": "float32"} in doc["inputs"]
    inputs, ref_actions, ref_logits, mask = _lanes(algo, "Pendulum-v1")
    inputs = _as_signed(inputs, path)
    names = ("obs", "prev_actions", "prev_rewards", "t")
    actions, logits = _replay(load_stablehlo(path), inputs, names, _stale_state(path))
    _assert_acts_as_the_actor(actions, logits, ref_actions, ref_logits, mask)
    assert np.abs(actions[mask]).max() <= 2.0

    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("jax2onnx")
    session = ort.InferenceSession(algo.export_policy(str(tmp_path / "p.onnx"), "onnx"))

    actions, logits = _replay(_onnx_lstm_step(session, names), inputs, names,
                              _stale_state(path))
    _assert_acts_as_the_actor(actions, logits, ref_actions, ref_logits, mask)


def test_frame_stacking_takes_the_observation_window(cartpole_data, tmp_path):
    algo = (BCConfig().environment("CartPole-v1").offline_data(input_=cartpole_data)
            .training(num_updates_per_iteration=2, train_batch_size_per_learner=64,
                      learner_connector=lambda s: [frame_stack(3)])
            .rl_module(model_config={"fcnet_hiddens": [16]}).env_runners(
                episode_lookback_horizon=2).evaluation(evaluation_interval=0)).build()
    algo.train()
    path = algo.export_policy(str(tmp_path / "stack.stablehlo"))
    doc = json.load(open(signature_path(path)))
    assert doc["observation_lookback"] == 2
    assert doc["inputs"] == [{"name": "obs", "shape": ["B", 3, 4], "dtype": "float32"},
                             {"name": "t", "shape": ["B"], "dtype": "int32"}]
    inputs, ref_actions, ref_logits, mask = _lanes(algo, "CartPole-v1", lookback=2)
    inputs = _as_signed(inputs, path)
    actions, logits = _replay(load_stablehlo(path), inputs, ("obs", "t"), None)
    _assert_acts_as_the_actor(actions, logits, ref_actions, ref_logits, mask)
    with pytest.raises(ExportError, match="without recurrent state"):
        initial_state(path, 2)

    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("jax2onnx")
    session = ort.InferenceSession(algo.export_policy(str(tmp_path / "stack.onnx"), "onnx"))
    assert [i.name for i in session.get_inputs()] == ["obs", "t"]
    actions, logits = _replay(lambda x: session.run(None, x), inputs, ("obs", "t"), None)
    _assert_acts_as_the_actor(actions, logits, ref_actions, ref_logits, mask)


def test_cli_exports_a_recurrent_checkpoint(lstm_bc, tmp_path, capsys):
    from rljax_offline import cli

    checkpoint = lstm_bc.save(str(tmp_path / "checkpoint"))
    assert cli.main(["export", "--checkpoint", checkpoint, "--output",
                     str(tmp_path / "cli.stablehlo")]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["call"] == "step(inputs)" and out["signature"] == out["output"] + ".json"
    assert out["inputs"] == ["obs", "prev_actions", "prev_rewards", "state.c", "state.h", "t"]
    step = load_stablehlo(out["output"])
    x = {"obs": np.zeros((2, 4), np.float32), "prev_actions": np.zeros(2, np.int32),
         "prev_rewards": np.zeros(2, np.float32), "t": np.zeros(2, np.int32),
         "state": initial_state(out["output"], 2)}
    reference = load_stablehlo(lstm_bc.export_policy(str(tmp_path / "same.stablehlo")))(x)
    np.testing.assert_array_equal(step(x)[1], reference[1])  # the checkpoint's own params


def test_more_than_the_previous_action_is_a_named_error():
    from rljax_offline.connectors.env_to_module import prev_actions_rewards

    algo = BCConfig().environment("CartPole-v1").training(
        learner_connector=lambda s: [prev_actions_rewards(2, 0)]).rl_module(
        model_config={"fcnet_hiddens": [8]}).build()
    with pytest.raises(ExportError, match="last 2 actions/rewards"):
        algo.export_policy("never_written.stablehlo")


def test_filter_then_frame_stacking_exports_rllibs_numbers(cartpole_data, tmp_path):
    """Mean-std filter then frame stacking: with the fitted (fixed) statistics the exported
    step normalizes each past frame as RLlib did at its step (the same statistics), zeros
    before the reset stay zeros (frame stacking pads after the filter), as the actor does."""
    import jax

    from rljax_offline.connectors import mean_std_filter, named_states

    algo = (BCConfig().environment("CartPole-v1").offline_data(input_=cartpole_data)
            .training(num_updates_per_iteration=2, train_batch_size_per_learner=64,
                      learner_connector=lambda s: [mean_std_filter(as_learner_connector=True),
                                                   frame_stack(3)])
            .rl_module(model_config={"fcnet_hiddens": [16]})
            .evaluation(evaluation_interval=0)).build()
    algo.train()
    path = algo.export_policy(str(tmp_path / "filtered_stack.stablehlo"))
    inputs, ref_actions, ref_logits, mask = _lanes(algo, "CartPole-v1", lookback=2)
    inputs = _as_signed(inputs, path)
    actions, logits = _replay(load_stablehlo(path), inputs, ("obs", "t"), None)
    _assert_acts_as_the_actor(actions, logits, ref_actions, ref_logits, mask)

    def find(tree):
        if isinstance(tree, dict):
            for k, v in tree.items():
                found = v if k == "mean_std_filter" else find(v)
                if found is not None:
                    return found
        return None

    (stats,) = jax.tree_util.tree_leaves(find(named_states(algo.env_to_module_connector,
                                                            algo._e2m_state())),
                                         is_leaf=lambda x: hasattr(x, "m2"))
    count, mean = float(stats.count), np.asarray(stats.mean, np.float64)
    std = np.sqrt(np.asarray(stats.m2, np.float64) / (count - 1))
    window, t = inputs["obs"].astype(np.float64), inputs["t"]  # [LANES, T, 3, 4]
    frames = np.clip((window - mean) / (std + 1e-6), -10, 10)
    real = (np.arange(3)[None, None, :] >= 2 - t[..., None])[..., None]  # not before reset
    stacked = np.where(real, frames, 0.0).reshape(*t.shape, 12).astype(np.float32)
    want = np.asarray(algo.spec.acting.act(jax.device_get(algo.state.params), stacked[mask]))
    np.testing.assert_allclose(logits[mask], want, atol=1e-4, rtol=1e-4)
    algo.stop()
