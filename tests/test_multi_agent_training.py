"""Offline multi-agent training through `config.multi_agent(...)` (`MultiAgentAlgorithm`).

* one shared module trains exactly what the single-agent algorithm trains on the same agent
  episodes (BC, CQL, IQL: no multi-agent code in any algorithm);
* heterogeneous agents (other spaces) get modules of their own, stepped in one compiled call;
  modules of one config and spaces are stacked; `policies_to_train` leaves the others exact;
* 8 devices give the 1-device result; save / restore resumes exactly;
* bad settings (an unknown module, a module without agents, data of an agent with no module,
  policies_to_train naming none or an unknown module) are one-line named errors.
"""

import json

import gymnasium as gym
import jax
import numpy as np
import pytest
from offline_rl_testlib import assert_resume_is_exact

from rljax_offline import BCConfig, CQLConfig, IQLConfig
from rljax_offline.acting.multi_agent_runner import MultiAgentEnvRunner, random_policy
from rljax_offline.algorithms.multi_agent_data import episodes_by_module, read_input
from rljax_offline.data.multi_agent_io import write_multi_agent_episodes
from rljax_offline.envs.async_agents import AsyncAgentsEnv
from rljax_offline.errors import ConfigError, OfflineDataError
from rljax_offline.learning.checkpoint import load_meta
from rljax_offline.learning.multi_module import unstack

ASYNC = "rljax_offline.envs.async_agents:AsyncAgentsEnv"


class TwoKindsEnv:
    """Two kinds of agents with different spaces: `scout_*` observe Box(3) and pick one of
    2 actions, `worker_*` observe Box(2) and pick one of 3; 6 steps, reward 1 when the action
    is the step's parity (scouts) or the step mod 3 (workers)."""

    possible_agents = ("scout_0", "scout_1", "worker_0")

    def __init__(self, config=None):
        self.t, self.agents = 0, list(self.possible_agents)

    def observation_space(self, agent):
        return gym.spaces.Box(-1.0, 1.0, (3 if agent.startswith("scout") else 2,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(2 if agent.startswith("scout") else 3)

    def _obs(self):
        return {a: np.full(self.observation_space(a).shape, self.t / 6, np.float32)
                for a in self.agents}

    def reset(self, seed=None, options=None):
        self.t, self.agents = 0, list(self.possible_agents)
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        rewards = {a: float(actions[a] == self.t % (2 if a.startswith("scout") else 3))
                   for a in actions}
        self.t += 1
        done = self.t >= 6
        obs = self._obs()
        flags = {a: done for a in obs}
        if done:
            self.agents = []
        return obs, rewards, dict.fromkeys(obs, False), flags, {a: {} for a in obs}


def _record(env_fn, mapping, path, episodes=24, seed=0):
    probe = env_fn()
    modules = {mapping(a, None) for a in probe.possible_agents}
    policies = {m: random_policy(probe.action_space(next(
        a for a in probe.possible_agents if mapping(a, None) == m))) for m in modules}
    runner = MultiAgentEnvRunner(env_fn, policies, agent_to_module_mapping_fn=mapping,
                                 num_envs=4, seed=seed)
    write_multi_agent_episodes(runner.sample(episodes), str(path))
    return str(path)


@pytest.fixture(scope="module")
def async_data(tmp_path_factory):
    return _record(AsyncAgentsEnv, lambda a, e: "default_policy",
                   tmp_path_factory.mktemp("async"))


@pytest.fixture(scope="module")
def two_kinds_data(tmp_path_factory):
    return _record(TwoKindsEnv, lambda a, e: a.split("_")[0], tmp_path_factory.mktemp("kinds"))


def _small(config, data, **training):
    return (config.offline_data(input_=data)
            .training(**{"train_batch_size_per_learner": 32, "num_updates_per_iteration": 5,
                         **training})
            .rl_module(model_config={"fcnet_hiddens": [16]})
            .evaluation(evaluation_interval=0))


class _AgentSpaces(gym.Env):
    """A single-agent env with an async agent's spaces (the single-agent run reads spaces
    from its env; it never steps it)."""

    observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)


def _params(algo):
    return jax.device_get(unstack(algo.groups, {g: s.params for g, s in algo.state.items()}))


def _max_diff(a, b):
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
               for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


@pytest.mark.parametrize("config_class", [BCConfig, CQLConfig, IQLConfig])
def test_a_shared_module_trains_what_the_single_agent_algorithm_trains(config_class,
                                                                       async_data):
    multi = _small(config_class().environment(ASYNC).multi_agent(count_steps_by="agent_steps"),
                   async_data).learners(num_devices=1).build()
    multi.train()
    episodes = episodes_by_module(read_input(async_data), multi.mapping,
                                  multi.modules)["default_policy"]
    single = _small(config_class().environment(lambda cfg: _AgentSpaces()), async_data
                    ).offline_data(input_read_method=lambda _input, **kw: list(episodes)
                                   ).learners(num_devices=1).build()
    single.train()
    got = _params(multi)["default_policy"]
    want = jax.device_get(single.state.params)
    # the same program but for a vmap over one module: float32 rounding of 5 updates
    assert _max_diff(got, want) < 1e-5


def test_heterogeneous_agents_get_their_own_modules_in_one_compiled_update(two_kinds_data):
    config = _small(BCConfig().environment(lambda cfg: TwoKindsEnv()).multi_agent(
        policies={"scout", "worker"}, policy_mapping_fn=lambda a, e: a.split("_")[0]),
        two_kinds_data)
    algo = config.build()
    assert set(algo.groups) == {"scout", "worker"}  # other spaces: groups of their own
    assert algo.modules["scout"].rows_per_update == 64  # 2 scouts x 32 env steps
    assert algo.modules["worker"].rows_per_update == 32
    before = _params(algo)
    result = algo.train()
    assert len(algo.runtime._compiled) == 1  # one program for both modules
    after = _params(algo)
    for m in ("scout", "worker"):
        assert _max_diff(before[m], after[m]) > 0
        assert result["learners"][m]["num_module_steps_trained"] == 5 * (64 if m == "scout"
                                                                         else 32)
    kernel = after["scout"]["policy"]["params"]
    first = jax.tree_util.tree_leaves(kernel)
    assert any(x.shape[0] == 3 for x in first)  # the scout's 3-wide observations


def test_modules_of_one_config_stack_and_policies_to_train_leaves_the_rest(async_data):
    config = _small(BCConfig().environment(ASYNC).multi_agent(
        policies={"fast", "slow", "late"}, policy_mapping_fn=lambda a, e: a,
        policies_to_train=["fast", "late"]), async_data)
    algo = config.build()
    assert list(algo.groups) == ["fast"] and algo.groups["fast"].module_ids == (
        "fast", "late", "slow")  # one spec: stacked under vmap
    before = _params(algo)
    result = algo.train()
    after = _params(algo)
    assert _max_diff(before["slow"], after["slow"]) == 0.0  # not trained: exactly as it was
    assert _max_diff(before["fast"], after["fast"]) > 0
    assert _max_diff(before["fast"], before["late"]) > 0  # each module its own init draw
    assert "slow" not in result["learners"]


def test_eight_devices_give_the_one_device_result(two_kinds_data):
    def run(devices):
        config = _small(BCConfig().environment(lambda cfg: TwoKindsEnv()).multi_agent(
            policies={"scout", "worker"}, policy_mapping_fn=lambda a, e: a.split("_")[0]),
            two_kinds_data).learners(num_devices=devices)
        algo = config.build()
        algo.train()
        return _params(algo)

    one, eight = run(1), run(8)
    # float32 sums over 32-64 rows in another order, 5 Adam steps: rounding, not drift
    assert _max_diff(one, eight) < 1e-4


def test_save_and_restore_resume_exactly(async_data, tmp_path):
    config = _small(BCConfig().environment(ASYNC).multi_agent(
        policies={"fast", "slow", "late"}, policy_mapping_fn={a: a for a in
                                                              ("fast", "slow", "late")}),
        async_data)
    assert_resume_is_exact(config, tmp_path, iterations=2)


def test_evaluation_reports_the_team_and_per_module_returns(two_kinds_data):
    config = _small(BCConfig().environment(lambda cfg: TwoKindsEnv()).multi_agent(
        policies={"scout", "worker"}, policy_mapping_fn=lambda a, e: a.split("_")[0]),
        two_kinds_data).evaluation(evaluation_interval=1, evaluation_duration=3)
    metrics = config.build().train()["evaluation"]["env_runners"]
    assert metrics["num_episodes"] == 3 and metrics["episode_len_mean"] == 6
    per_agent = metrics["agent_episode_returns_mean"]
    assert set(per_agent) == {"scout_0", "scout_1", "worker_0"}
    assert metrics["episode_return_mean"] == pytest.approx(sum(per_agent.values()))
    assert set(metrics["module_episode_returns_mean"]) == {"scout", "worker"}


def test_bad_multi_agent_settings_are_named_errors(async_data, two_kinds_data):
    base = _small(BCConfig().environment(ASYNC), async_data)
    with pytest.raises(ConfigError, match="maps agent 'fast' to module 'nope', which is not "
                                          r"in policies \['a'\]"):
        base.multi_agent(policies={"a"}, policy_mapping_fn=lambda a, e: "nope").build()
    with pytest.raises(ConfigError, match=r"policies \['b'\] have no agent"):
        base.multi_agent(policies={"a", "b"}, policy_mapping_fn=lambda a, e: "a").build()
    with pytest.raises(ValueError, match="policies_to_train names modules"):
        base.multi_agent(policies_to_train=["ghost"]).build()
    with pytest.raises(ValueError, match="policies_to_train names no module"):
        base.multi_agent(policies_to_train=[]).build()
    with pytest.raises(ConfigError, match="policies_to_train must be None or a list of "
                                          "module ids"):
        base.multi_agent(policies_to_train=[""])
    with pytest.raises(ConfigError, match="has no module for agent 'scout_0'"):
        _small(BCConfig().environment(ASYNC), two_kinds_data).multi_agent(
            policies={"a"}, policy_mapping_fn={a: "a" for a in ("fast", "slow", "late")}
        ).build().train()
    with pytest.raises(ConfigError, match="materialize_data=True"):
        base.offline_data(materialize_data=False, materialize_mapped_data=False
                          ).multi_agent().build()
    with pytest.raises(OfflineDataError, match=r"agent 'worker_0': observations of shape "
                                               r"\(2,\), but module 'default_policy' "
                                               r"observes \(3,\)"):
        class _Scouts(TwoKindsEnv):
            possible_agents = ("scout_0",)
        _small(BCConfig().environment(lambda cfg: _Scouts()), two_kinds_data).multi_agent(
        ).build().train()


def test_run_training_logs_and_resumes_a_multi_agent_run(two_kinds_data, tmp_path):
    from rljax_offline.apps.training_loop import run_training

    config = _small(BCConfig().environment(lambda cfg: TwoKindsEnv()).multi_agent(
        policies={"scout", "worker"}, policy_mapping_fn=lambda a, e: a.split("_")[0]),
        two_kinds_data).evaluation(evaluation_interval=1, evaluation_duration=2)
    rows = []
    first = run_training(config, iterations=1, out_dir=str(tmp_path), progress=False,
                         emit=rows.append)
    assert first["plot"] and "total_loss" in rows[0]  # the first module's (scout's) loss
    again = run_training(config, iterations=2, out_dir=str(tmp_path), progress=False)
    assert again["resumed_from_iteration"] == 1 and again["iterations_trained"] == 1


def test_trained_modules_export_and_are_judged_by_team_ope(two_kinds_data, tmp_path):
    from rljax_offline.ope.multi_agent import team_episodes, team_spaces

    config = _small(BCConfig().environment(lambda cfg: TwoKindsEnv()).multi_agent(
        policies={"scout", "worker"}, policy_mapping_fn=lambda a, e: a.split("_")[0]),
        two_kinds_data)
    algo = config.build()
    algo.train()
    assert (tmp_path / "scout.json").exists() is False
    algo.export_policy("scout", str(tmp_path / "scout"))
    assert (tmp_path / "scout.json").exists()
    episodes = read_input(two_kinds_data)
    targets = algo.agent_targets()
    assert set(targets) == {"scout_0", "scout_1", "worker_0"}
    obs = np.zeros((4, 3), np.float32)
    np.testing.assert_allclose(targets["scout_0"](obs).sum(axis=1), 1.0, rtol=1e-5)
    estimates = algo.estimate_off_policy(episodes, ["wis"], num_bootstrap=10)
    spaces = team_spaces(episodes)
    assert spaces.action_space.n == 12 and len(team_episodes(episodes, spaces)) == 24
    assert np.isfinite(estimates["wis"]["v_target"])


@pytest.mark.parametrize("mode", ["shared", "per-agent"])
def test_the_train_command_trains_multi_agent_data(mode, async_data, tmp_path, capsys):
    from rljax_offline.cli import main

    rc = main(["train", "--multi-agent", mode, "--env", ASYNC, "--input", async_data,
               "--iterations", "1", "--updates-per-iteration", "3", "--batch-size", "16",
               "--hiddens", "8", "--eval-episodes", "2", "--num-devices", "1", "--quiet",
               "--no-tensorboard", "--out", str(tmp_path / mode)])
    assert rc == 0
    summary = [json.loads(line) for line in capsys.readouterr().out.splitlines()
               if line.startswith("{")][-1]
    assert summary["command"] == "train" and summary["iterations"] == 1
    meta = load_meta(str(tmp_path / mode / "checkpoint"))
    modules = ["default_policy"] if mode == "shared" else ["fast", "late", "slow"]
    assert sorted(m for g in meta["groups"].values() for m in g) == modules
