"""MATD3+BC (`algorithms.matd3_bc`) and its joint rows (`connectors.joint_rows`) on mpe2's
continuous `simple_spread_v3` (3 agents, Box(0, 1, (5,)) actions), recorded here with random
actions and short episodes.

* joint rows are each agent's steps aligned by env step, with the env's state around them;
* one agent with its observation as the global state: MATD3+BC's update is TD3+BC's;
* the critic's and the BC losses fall; 8 devices give the 1-device result; save / restore
  resumes exactly; the shared actor acts per agent in the env;
* agents that do not act at every env step, missing global state, module overrides with
  several modules: named errors (tests/test_matd3_bc_hetero.py: agents of different spaces).
"""

import jax
import numpy as np
import pytest
from offline_rl_testlib import assert_resume_is_exact

pytest.importorskip("mpe2")

from rljax_offline import MATD3BCConfig, TD3BCConfig  # noqa: E402
from rljax_offline.acting.multi_agent_runner import (  # noqa: E402
    MultiAgentEnvRunner,
    random_policy,
)
from rljax_offline.algorithms.multi_agent_data import read_input  # noqa: E402
from rljax_offline.connectors.joint_rows import joint_rows  # noqa: E402
from rljax_offline.data.multi_agent_io import write_multi_agent_episodes  # noqa: E402
from rljax_offline.envs.async_agents import AsyncAgentsEnv  # noqa: E402
from rljax_offline.envs.make import multi_agent_env_factory  # noqa: E402
from rljax_offline.errors import (  # noqa: E402
    AsynchronousAgentsError,
    ConfigError,
    MissingGlobalStateError,
)
from rljax_offline.learning.multi_module import unstack  # noqa: E402

SPREAD = "mpe2.simple_spread_v3:parallel_env"
SIMPLE = "mpe2.simple_v3:parallel_env"  # one agent


def _record(env, path, episodes=24, max_cycles=8, global_state=True, seed=0):
    env_fn = multi_agent_env_factory(env, {"continuous_actions": True,
                                           "max_cycles": max_cycles})
    space = env_fn().action_space("agent_0")
    runner = MultiAgentEnvRunner(env_fn, {"p": random_policy(space)},
                                 agent_to_module_mapping_fn=lambda a, e: "p", num_envs=4,
                                 seed=seed, global_state=global_state)
    episodes = runner.sample(episodes)
    write_multi_agent_episodes(episodes, str(path))
    return str(path)


@pytest.fixture(scope="module")
def spread(tmp_path_factory):
    return _record(SPREAD, tmp_path_factory.mktemp("spread"))


def _config(data, env=SPREAD, **training):
    return (MATD3BCConfig()
            .environment(env, env_config={"continuous_actions": True, "max_cycles": 8})
            .offline_data(input_=data)
            .training(**{"train_batch_size_per_learner": 32, "num_updates_per_iteration": 6,
                         **training})
            .rl_module(model_config={"fcnet_hiddens": [16, 16]})
            .evaluation(evaluation_interval=0).multi_agent())


def _params(algo):
    return jax.device_get(unstack(algo.groups, {g: s.params for g, s in algo.state.items()}))


def _max_diff(a, b):
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
               for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b),
                               strict=True))


def _chunk(episode, start, stop):
    """`episode[start:stop]` with its global states (a slice keeps the custom data as it
    is): one per entry of the chunk's env-step map, its lookback included."""
    chunk = episode[start:stop]
    lookback = chunk.map_lookback["agent_0"]
    states = np.asarray(episode.custom_data["global_state"])[start - lookback:stop + 1]
    return chunk.replace(custom_data={"global_state": states})


def test_joint_rows_are_the_agents_steps_aligned_by_env_step(spread):
    episodes = read_input(spread)
    # chunks of other lengths: rows come episode by episode, shorter episodes first
    episodes = [_chunk(episodes[0], 0, 3), *episodes[1:4], _chunk(episodes[4], 2, 7)]
    agents = ("agent_0", "agent_1", "agent_2")
    cols, lengths = joint_rows(episodes, agents)
    assert lengths == [3, 5, 8, 8, 8]
    ordered = [episodes[0], episodes[4], *episodes[1:4]]
    row = 0
    for ep in ordered:
        states = np.asarray(ep.custom_data["global_state"])
        for t in range(len(ep)):
            for i, a in enumerate(agents):
                agent = ep.agent_episodes[a]
                np.testing.assert_array_equal(cols["obs"][row, i], agent.get_observations(t))
                np.testing.assert_array_equal(cols["new_obs"][row, i],
                                              agent.get_observations(t + 1))
                np.testing.assert_array_equal(cols["actions"][row, i], agent.get_actions(t))
                assert cols["rewards"][row, i] == np.float32(agent.get_rewards(t))
            assert cols["team_rewards"][row] == pytest.approx(cols["rewards"][row].sum())
            np.testing.assert_allclose(cols["global_state"][row], states[t])
            np.testing.assert_allclose(cols["new_global_state"][row], states[t + 1])
            row += 1
    assert row == cols["obs"].shape[0] == sum(lengths)
    assert not cols["terminateds"].any()  # mpe2 truncates at max_cycles
    concat, _ = joint_rows(episodes, agents, global_state=False)
    np.testing.assert_array_equal(concat["global_state"], cols["obs"].reshape(row, -1))


def test_one_agent_matd3_bc_is_td3_bc(tmp_path):
    data = _record(SIMPLE, tmp_path / "simple", episodes=12)
    multi = _config(data, env=SIMPLE, use_global_state=False).learners(num_devices=1).build()
    multi.train()
    episodes = [ep.agent_episodes["agent_0"] for ep in read_input(data)]

    import gymnasium as gym

    class _Spaces(gym.Env):
        observation_space = multi.modules["default_policy"].gym_spaces[0]
        action_space = multi.modules["default_policy"].gym_spaces[1]

    single = (TD3BCConfig().environment(lambda cfg: _Spaces())
              .offline_data(input_=data, input_read_method=lambda _input, **kw: episodes)
              .training(train_batch_size_per_learner=32, num_updates_per_iteration=6)
              .rl_module(model_config={"fcnet_hiddens": [16, 16]})
              .evaluation(evaluation_interval=0).learners(num_devices=1)).build()
    single.train()
    got, want = _params(multi)["default_policy"], jax.device_get(single.state.params)
    assert _max_diff(got, want) < 1e-5  # float32 rounding of 6 updates


def test_losses_fall_and_the_shared_actor_acts_per_agent(spread):
    algo = _config(spread, num_updates_per_iteration=25, alpha=0.0).evaluation(
        evaluation_interval=3, evaluation_duration=2).learners(num_devices=1).build()
    first = algo.train()["learners"]["default_policy"]
    algo.train()
    result = algo.train()
    last = result["learners"]["default_policy"]
    assert last["qf_loss_mean"] < first["qf_loss_mean"]
    assert last["bc_loss_mean"] < first["bc_loss_mean"]  # alpha 0: pure BC
    assert result["learners"]["__all_modules__"]["num_agent_steps_trained"] == 3 * 25 * 32
    shapes = jax.tree_util.tree_map(np.shape, algo.data["default_policy"].columns)
    assert shapes["obs"] == (192, 3, 18) and shapes["global_state"] == (192, 54)
    metrics = result["evaluation"]["env_runners"]
    assert metrics["num_episodes"] == 2 and metrics["episode_len_mean"] == 8
    assert set(metrics["agent_episode_returns_mean"]) == {"agent_0", "agent_1", "agent_2"}
    obs = np.zeros((3, 18), np.float32)  # the module's policy: per-agent obs -> actions
    actions = algo._module_actors()["default_policy"](obs, jax.random.PRNGKey(0))
    assert np.shape(actions) == (3, 5)


def test_eight_devices_give_the_one_device_result(spread):
    def run(devices):
        algo = _config(spread).learners(num_devices=devices).build()
        algo.train()
        return _params(algo)

    # float32 sums over 32 rows in another order, 6 updates: rounding, not drift
    assert _max_diff(run(1), run(8)) < 1e-4


def test_save_and_restore_resume_exactly(spread, tmp_path):
    config = _config(spread, actor_q_actions="own")  # the other form of the actor's Q term
    assert_resume_is_exact(config, tmp_path, iterations=2)


def test_without_the_env_state_the_critic_reads_the_concatenated_observations(tmp_path):
    data = _record(SPREAD, tmp_path / "stateless", episodes=8, global_state=False)
    with pytest.raises(MissingGlobalStateError, match="holds no global state"):
        _config(data).build().train()
    algo = _config(data, use_global_state=False).build()
    algo.train()
    cols = algo.data["default_policy"].columns
    assert cols["global_state"].shape == (64, 54)
    np.testing.assert_array_equal(np.asarray(cols["global_state"]),
                                  np.asarray(cols["obs"]).reshape(64, -1))


def test_bad_settings_and_data_are_named_errors(spread, tmp_path):
    with pytest.raises(ConfigError, match=r"drop the overrides of policies \['a'\]"):
        _config(spread).multi_agent(policies={"a": {"alpha": 1.0}, "b": None},
                                    policy_mapping_fn=lambda a, e: "a" if a == "agent_0"
                                    else "b").build()
    env_fn = multi_agent_env_factory("rljax_offline.envs.async_agents:AsyncAgentsEnv")
    runner = MultiAgentEnvRunner(env_fn, {"p": random_policy(AsyncAgentsEnv().action_space(
        "fast"))}, agent_to_module_mapping_fn=lambda a, e: "p", seed=0)
    episodes = runner.sample(2)
    with pytest.raises(AsynchronousAgentsError, match=r"agent '\w+': it (skips env steps|has "
                                                      r"\d+ steps in \d+ env steps)"):
        joint_rows(episodes, sorted(episodes[0].agent_ids), global_state=False)
    with pytest.raises(AsynchronousAgentsError, match=r"missing \['agent_9'\]"):
        joint_rows(read_input(_record(SPREAD, tmp_path / "few", episodes=4))[:1],
                   ("agent_0", "agent_1", "agent_2", "agent_9"))
