"""Mixed-quality data set recipes: what they hold, the CLI that records them, and BC failing."""

import json
import subprocess
import sys
from collections import Counter

import pytest

from rljax_offline import BCConfig
from rljax_offline.apps.recipes import RECIPES, record_mixed
from rljax_offline.data import read_episodes

EXPERT_RETURN = {"CartPole-v1": 500.0, "Pendulum-v1": -170.0}


def test_cartpole_mixed_puts_most_steps_near_the_start_on_poor_actions(tmp_path):
    record_mixed("cartpole-mixed-small", str(tmp_path), num_episodes=100)
    eps = read_episodes(str(tmp_path))
    behaviours = Counter(e.custom_data["behavior"] for e in eps)
    assert len(eps) == 100 and set(behaviours) == {"expert", "flip0.7"}
    assert 1 <= behaviours["expert"] <= 15
    # In the states near the start, flipped actions are the majority: BC copies them.
    early = [e.extra_model_outputs["action_perturbed"][:10] for e in eps]
    assert sum(int(p.sum()) for p in early) > 0.55 * sum(len(p) for p in early)


def test_unknown_recipe_is_a_named_error(tmp_path):
    with pytest.raises(ValueError, match="unknown data set recipe 'nope'.*cartpole-mixed"):
        record_mixed("nope", str(tmp_path))


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "rljax_offline.cli", *args],
                          capture_output=True, text=True, timeout=300)


def test_record_cli_options(tmp_path):
    out = run_cli("record", "--dataset", "pendulum-mixed-small", "--episodes", "4", "--output",
                  str(tmp_path / "p"))
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.splitlines()[-1])
    assert summary["env"] == "Pendulum-v1" and summary["mix"] == RECIPES[
        "pendulum-mixed-small"].mix and summary["episodes"] == 4
    out = run_cli("record", "--env", "CartPole-v1", "--flip-prob", "0.5", "--epsilon", "0.1",
                  "--episodes", "3", "--output", str(tmp_path / "c"))
    assert out.returncode == 0, out.stderr
    assert {e.custom_data["behavior"] for e in read_episodes(str(tmp_path / "c"))} == {
        "flip0.5+eps0.1"}
    out = run_cli("record", "--env", "CartPole-v1", "--action-noise", "0.3", "--output",
                  str(tmp_path / "bad"))
    assert out.returncode != 0
    assert out.stderr.strip().splitlines()[-1].startswith("error: rljax-offline record:")
    assert "noise needs a Box" in out.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name, bc_ceiling", [("cartpole-mixed-small", 150.0),
                                              ("pendulum-mixed-small", -700.0)])
def test_bc_fails_on_the_mixed_data(tmp_path, name, bc_ceiling):
    """BC on these sets stays far below the expert (500 on CartPole, about -170 on Pendulum)."""
    record_mixed(name, str(tmp_path))
    env = RECIPES[name].env_id
    algo = (BCConfig().environment(env).offline_data(input_=str(tmp_path))
            .training(lr=1e-3, train_batch_size_per_learner=256, num_updates_per_iteration=300)
            .learners(num_devices=1)
            .evaluation(evaluation_interval=1, evaluation_duration=10)
            .debugging(seed=0)).build()
    returns = [algo.train()["evaluation"]["env_runners"]["episode_return_mean"]
               for _ in range(2)]
    assert max(returns) < bc_ceiling < EXPERT_RETURN[env], returns
