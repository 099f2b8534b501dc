"""Off-policy evaluation from the outside: the config path (`off_policy_estimation_methods`,
`ope_split`), `ope.estimate` with a policy function, the named one-line errors and
`rljax-offline evaluate --offline` on tiny recorded data (with `--env`: the discounted env
return beside the estimates, `ope.discounted_env_value`)."""

import gymnasium as gym
import numpy as np
import pytest

from rljax_offline import BCConfig, ope
from rljax_offline.acting.env_runner import EnvRunner, record_expert
from rljax_offline.cli import main
from rljax_offline.data import read_episodes
from rljax_offline.errors import (
    ActionSpaceMismatchError,
    ConfigError,
    EmptyEvaluationSplitError,
    MissingActionLogpError,
    OPEError,
)

KEYS = {"v_behavior", "v_behavior_std", "v_target", "v_target_std", "v_gain", "v_delta",
        "v_target_ci", "ess"}
FAST_FQE = {"type": "fqe", "num_updates": 30, "model_config": {"fcnet_hiddens": [16]}}


def recorded(tmp_path_factory, env: str, num_episodes: int, mix: str) -> str:
    """A folder of `num_episodes` episodes of the behaviour mix `mix` (with `action_logp`)."""
    path = tmp_path_factory.mktemp("ope") / env
    record_expert(env, str(path), num_episodes=num_episodes, mix=mix, seed=0, progress=False)
    return str(path)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return recorded(tmp_path_factory, "CartPole-v1", 40, "expert:0.1,flip0.5:0.9")


@pytest.fixture(scope="module")
def bc_config(data):
    return (BCConfig().environment("CartPole-v1").offline_data(input_=data)
            .training(num_updates_per_iteration=20, train_batch_size_per_learner=64)
            .rl_module(model_config={"fcnet_hiddens": [16]})
            .evaluation(evaluation_duration=1, evaluation_num_envs=1))


def test_config_path_holds_out_episodes_and_reports_every_estimator(data, bc_config):
    methods = {"is": {"type": "is"}, "wis": {"type": "wis"},
               "pdis": {"type": "ImportanceSampling"}, "fqe": FAST_FQE,
               "dr": {**FAST_FQE, "type": "DoublyRobust", "bootstrap_heads": 2}}
    algo = bc_config.evaluation(off_policy_estimation_methods=methods, ope_split=0.25).build()
    result = algo.train()
    held = algo.data.ope_episodes
    assert held and algo.num_episodes + len(held) == 40
    train_ids = {ep.id_ for ep in read_episodes(data)} - {ep.id_ for ep in held}
    assert len(train_ids) == algo.num_episodes  # no held-out episode is trained on
    estimates = result["evaluation"]["off_policy_estimator"]
    assert set(estimates) == set(methods)
    for name, e in estimates.items():
        assert KEYS <= set(e), name
        assert e["num_episodes"] == len(held)
        assert np.isfinite(e["v_target"]) and e["v_target_ci"][0] <= e["v_target_ci"][1]
    assert estimates["fqe"]["ess"] is None and estimates["is"]["ess"] > 0
    # DR's own FQE fit of 2 bootstrap heads: their spread is reported; FQE's one head has none
    assert estimates["dr"]["fqe_bootstrap_heads"] == 2 and estimates["dr"]["v_target_model_std"] > 0
    assert estimates["fqe"]["v_target_model_std"] is None
    algo.stop()
    # RLlib's classes as types: kept by name, so the config saves and restores
    cfg = bc_config.evaluation(off_policy_estimation_methods={"dr": {"type": ope.DoublyRobust}})
    assert type(cfg).from_dict(cfg.to_dict()).off_policy_estimation_methods == {
        "dr": {"type": "DoublyRobust"}}
    with pytest.raises(ConfigError, match="unknown key"):
        bc_config.evaluation(off_policy_estimation_methods={"x": {"type": "is", "lr": 1}})


def test_policy_function_on_policy_is_the_behaviour_value(data):
    """The uniform policy on data that flips a deterministic expert's action with p=0.5 and
    two actions: every recorded action has probability 0.5 under both, so the weights are 1."""
    eps = [ep for ep in read_episodes(data) if ep.custom_data["behavior"] == "flip0.5"]
    uniform = lambda obs: np.full((len(obs), 2), 0.5)  # noqa: E731
    out = ope.estimate(uniform, eps, methods=["is", "wis", "pdis"], gamma=0.9,
                       action_space=gym.spaces.Discrete(2), num_bootstrap=20)
    # the recorded log(0.5) is float32: a ratio of 1 +- 6e-8 a step, over < 100 steps
    for e in out.values():
        assert e["v_target"] == pytest.approx(e["v_behavior"], rel=1e-5)
        assert e["ess"] == pytest.approx(len(eps), rel=1e-5)


def one_line(e) -> str:
    text = str(e.value)
    assert "\n" not in text
    return text


@pytest.fixture(scope="module")
def pendulum_data(tmp_path_factory):
    return recorded(tmp_path_factory, "Pendulum-v1", 2, "expert:0.5,random:0.5")


def test_named_one_line_errors(data, bc_config, pendulum_data):
    eps = read_episodes(data)
    bare = [ep.replace(extra_model_outputs={}) for ep in eps]
    uniform = lambda obs: np.full((len(obs), 2), 0.5)  # noqa: E731
    with pytest.raises(MissingActionLogpError) as e:
        ope.estimate(uniform, bare, methods=["is", "wis", "fqe"],
                     action_space=gym.spaces.Discrete(2))
    text = one_line(e)
    assert "['is', 'wis']" in text and "action_logp" in text and "'fqe'" in text
    # FQE alone needs no action_logp
    ope.estimate(uniform, bare, methods=[FAST_FQE["type"]], fqe={"num_updates": 5},
                 action_space=gym.spaces.Discrete(2), num_bootstrap=5)
    box = lambda obs: (np.zeros((len(obs), 1)), np.ones((len(obs), 1)))  # noqa: E731
    with pytest.raises(ActionSpaceMismatchError) as e:
        ope.estimate(box, eps, methods=["wis"],
                     action_space=gym.spaces.Box(-1.0, 1.0, (1,), np.float32))
    assert "Box" in one_line(e) and "Discrete" in one_line(e)
    # a deterministic Box target has no density: the weighted estimators are a named error
    pendulum = read_episodes(pendulum_data)
    point = lambda obs: (np.zeros((len(obs), 1)), np.zeros((len(obs), 1)))  # noqa: E731
    box = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    with pytest.raises(OPEError, match="deterministic Box target") as e:
        ope.estimate(point, pendulum, methods=["wis", "dr"], action_space=box)
    one_line(e)
    out = ope.estimate(point, pendulum, methods=["fqe"], action_space=box, num_bootstrap=5,
                       fqe={"num_updates": 5, "model_config": {"fcnet_hiddens": [8]}})
    assert np.isfinite(out["fqe"]["v_target"])
    # Recorded ids are random: fixed ones make the split deterministic (none of these three
    # hashes below 0.01 with seed 0).
    three = [ep.replace(id_=f"ep{i}") for i, ep in enumerate(eps[:3])]
    with pytest.raises(EmptyEvaluationSplitError) as e:
        ope.split(three, 0.01, seed=0)
    assert "ope_split=0.01" in one_line(e)


def test_cli_offline_evaluate_prints_a_table_and_writes_a_plot(data, bc_config, tmp_path,
                                                               capsys):
    algo = bc_config.evaluation(evaluation_interval=0).build()
    algo.train()
    ckpt = algo.save(str(tmp_path / "ckpt"))
    png = tmp_path / "ope.png"
    code = main(["evaluate", "--offline", "--input", data, "--checkpoint", ckpt,
                 "--checkpoint", ckpt, "--methods", "wis,fqe", "--fqe-updates", "5",
                 "--bootstrap", "10", "--plot", str(png), "--env", "CartPole-v1",
                 "--episodes", "2", "--gamma", "0"])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.strip().splitlines()
    assert "wis" in lines[0] and "fqe" in lines[0] and "env return" in lines[0]
    rows = [line for line in lines if ckpt[-20:] in line]
    assert len(rows) == 2
    assert all(row.split()[1] == "1.00" for row in rows)  # gamma 0: the first reward, 1
    assert png.stat().st_size > 1000
    code = main(["evaluate", "--offline", "--checkpoint", ckpt])
    assert code == 2 and "--input" in capsys.readouterr().err


def test_discounted_env_value_is_the_mean_discounted_return_in_the_env():
    def left(obs):
        return np.zeros(len(obs), np.int64)

    runner = EnvRunner("CartPole-v1", left, num_envs=4, seed=3)
    lengths = [len(ep) for ep in runner.sample(num_episodes=4)]
    runner.close()
    values = [(1 - 0.9**n) / (1 - 0.9) for n in lengths]  # reward 1 a step
    mean, stderr = ope.discounted_env_value(left, "CartPole-v1", 0.9, 4, seed=3, num_envs=4)
    assert mean == pytest.approx(np.mean(values))
    assert stderr == pytest.approx(np.std(values) / 2.0)
    assert ope.discounted_env_value(left, "CartPole-v1", 0.0, 4, seed=3) == (1.0, 0.0)
