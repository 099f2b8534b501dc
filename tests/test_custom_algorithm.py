"""The README's "Add your own algorithm" example (TD3+BC) runs as written: the code block is
taken from the README, registered, trained on Pendulum expert data, checkpointed and
restored through the registry, and run on 8 devices."""

import re

import pytest
from conftest import REPO
from learner_testlib import max_diff

from rljax_offline import Algorithm
from rljax_offline.acting.env_runner import record_expert


def readme_example() -> dict:
    text = (REPO / "README.md").read_text()
    section = text[text.index("### Add your own algorithm"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {"__name__": "readme_td3_bc"}
    exec(compile(code, "README.md (Add your own algorithm)", "exec"), namespace)
    return namespace


# Measured level -792 (untrained -1,625, the expert about -150); zero torque scores about
# -1,229, so the floor sits between a policy that learned and one that outputs nothing.
TD3BC_FLOOR = -1000.0


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory):
    path = tmp_path_factory.mktemp("pendulum")
    record_expert("Pendulum-v1", str(path), num_episodes=20, progress=False)
    return str(path)


@pytest.mark.slow
def test_readme_td3_bc_trains_on_pendulum(pendulum, tmp_path):
    TD3BCConfig = readme_example()["TD3BCConfig"]
    algo = (TD3BCConfig().environment("Pendulum-v1").offline_data(input_=pendulum)
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
    assert {"qf_loss", "policy_loss", "gradients_critic_global_norm",
            "gradients_actor_global_norm"} <= set(learner)
    level = sum(returns[-2:]) / 2  # what it learned, not one lucky evaluation
    print(f"TD3+BC on Pendulum expert data: untrained {first:.0f}, after each iteration "
          f"{[round(r) for r in returns]}, level {level:.0f} (expert about -150)")
    assert level >= TD3BC_FLOOR and level > first + 500, (first, returns)
    algo.save(str(tmp_path / "ckpt"))
    back = Algorithm.from_checkpoint(str(tmp_path / "ckpt"))
    assert type(back.config).__name__ == "TD3BCConfig"
    assert max_diff(back.state.params, algo.state.params) == 0.0


def test_readme_td3_bc_runs_on_eight_devices(pendulum):
    TD3BCConfig = readme_example()["TD3BCConfig"]
    algo = (TD3BCConfig().environment("Pendulum-v1").offline_data(input_=pendulum)
            .training(train_batch_size_per_learner=64, num_updates_per_iteration=4)
            .learners(num_devices=8).evaluation(evaluation_interval=0)
            .rl_module(model_config={"fcnet_hiddens": [16]}).build())
    result = algo.train()
    assert result["num_devices"] == 8 and int(algo.state.step) == 4
    # actor steps only on every 2nd update: its optimizer counted 2 of the 4
    adam = algo.state.opt_states["actor"][0]
    assert int(adam.count) == 2
