"""The "Add your own algorithm" guide's example (deterministic BC for Box actions) runs as
written: the code block is taken from docs/guides/custom-algorithm.md, registered, trained on
Pendulum expert data, checkpointed and restored through the registry, and run on 8 devices.
(TD3+BC, the guide's example before it was built in, has its own tests in test_td3_bc.py.)"""

import re

import pytest
from conftest import REPO
from learner_testlib import max_diff

from rljax_offline import Algorithm, ConfigError
from rljax_offline.acting.env_runner import record_expert


def readme_example() -> dict:
    text = (REPO / "docs" / "guides" / "custom-algorithm.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    namespace: dict = {"__name__": "readme_deterministic_bc"}
    exec(compile(code, "docs/guides/custom-algorithm.md", "exec"), namespace)
    return namespace


# Zero torque scores about -1,229 and the expert about -150: the floor sits between a policy
# that learned and one that outputs nothing.
FLOOR = -1000.0


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory):
    path = tmp_path_factory.mktemp("pendulum")
    record_expert("Pendulum-v1", str(path), num_episodes=20, progress=False)
    return str(path)


@pytest.mark.slow
def test_readme_example_trains_on_pendulum(pendulum, tmp_path):
    DeterministicBCConfig = readme_example()["DeterministicBCConfig"]
    algo = (DeterministicBCConfig().environment("Pendulum-v1").offline_data(input_=pendulum)
            .training(train_batch_size_per_learner=256, num_updates_per_iteration=1000)
            .learners(num_devices=1)
            .evaluation(evaluation_interval=0, evaluation_duration=10, evaluation_num_envs=10)
            .build())
    first = algo.evaluate(10)["episode_return_mean"]
    returns = []
    for _ in range(3):
        result = algo.train()
        returns.append(algo.evaluate(10)["episode_return_mean"])
    learner = result["learners"]["default_policy"]
    assert {"policy_loss", "gradients_policy_global_norm"} <= set(learner)
    level = sum(returns[-2:]) / 2  # what it learned, not one lucky evaluation
    print(f"deterministic BC on Pendulum expert data: untrained {first:.0f}, after each "
          f"iteration {[round(r) for r in returns]}, level {level:.0f} (expert about -150)")
    assert level >= FLOOR and level > first + 500, (first, returns)
    algo.save(str(tmp_path / "ckpt"))
    back = Algorithm.from_checkpoint(str(tmp_path / "ckpt"))
    assert type(back.config).__name__ == "DeterministicBCConfig"
    assert max_diff(back.state.params, algo.state.params) == 0.0


def test_readme_example_runs_on_eight_devices_and_refuses_discrete_actions(pendulum):
    DeterministicBCConfig = readme_example()["DeterministicBCConfig"]
    algo = (DeterministicBCConfig().environment("Pendulum-v1").offline_data(input_=pendulum)
            .training(train_batch_size_per_learner=64, num_updates_per_iteration=4)
            .learners(num_devices=8).evaluation(evaluation_interval=0)
            .rl_module(model_config={"fcnet_hiddens": [16]}).build())
    result = algo.train()
    assert result["num_devices"] == 8 and int(algo.state.step) == 4
    assert int(algo.state.opt_states["policy"][0].count) == 4
    with pytest.raises(ConfigError, match="needs Box actions"):
        DeterministicBCConfig().environment("CartPole-v1").offline_data(input_="x").build()
