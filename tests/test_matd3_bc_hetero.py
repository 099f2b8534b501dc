"""MATD3+BC with agents of different spaces: mpe2's continuous `simple_speaker_listener_v4`
(a speaker observes Box(3) and says Box(0, 1, (3,)), a listener observes Box(11) and moves
Box(0, 1, (5,))), the modules `speaker` and `listener`, recorded here with random actions.

* joint rows pad each agent's rows to the widest; the concatenated observations are each
  agent's own, unpadded;
* both modules' actors and the critic train in one compiled update; the critic reads
  3 + 11 observation and 3 + 5 action columns;
* the critic's and the BC losses fall; each module's actor acts for its agent in the env;
  save / restore resumes exactly;
* each agent weighs Q against its BC as TD3+BC does (the joint form's `1/A`);
* module overrides with several modules: a named error.
"""

import jax
import numpy as np
import pytest
from offline_rl_testlib import assert_resume_is_exact

pytest.importorskip("mpe2")

from rljax_offline import MATD3BCConfig  # noqa: E402
from rljax_offline.acting.multi_agent_runner import (  # noqa: E402
    MultiAgentEnvRunner,
    random_policy,
)
from rljax_offline.algorithms.multi_agent_data import read_input  # noqa: E402
from rljax_offline.connectors.joint_rows import joint_rows  # noqa: E402
from rljax_offline.data.multi_agent_io import write_multi_agent_episodes  # noqa: E402
from rljax_offline.envs.make import multi_agent_env_factory  # noqa: E402
from rljax_offline.errors import ConfigError  # noqa: E402
from rljax_offline.learning.multi_module import unstack  # noqa: E402
from rljax_offline.learning.update import BatchAxis  # noqa: E402

SL = "mpe2.simple_speaker_listener_v4:parallel_env"
ENV_CONFIG = {"continuous_actions": True, "max_cycles": 8}
MODULES = {"speaker_0": "speaker", "listener_0": "listener"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    env_fn = multi_agent_env_factory(SL, ENV_CONFIG)
    env = env_fn()
    policies = {m: random_policy(env.action_space(a)) for a, m in MODULES.items()}
    runner = MultiAgentEnvRunner(env_fn, policies,
                                 agent_to_module_mapping_fn=lambda a, e: MODULES[a],
                                 num_envs=4, seed=0)
    path = str(tmp_path_factory.mktemp("speaker_listener"))
    write_multi_agent_episodes(runner.sample(24), path)
    return path


def _config(data, **training):
    return (MATD3BCConfig().environment(SL, env_config=ENV_CONFIG)
            .offline_data(input_=data)
            .training(**{"train_batch_size_per_learner": 32, "num_updates_per_iteration": 6,
                         **training})
            .rl_module(model_config={"fcnet_hiddens": [16, 16]})
            .evaluation(evaluation_interval=0)
            .multi_agent(policies={"speaker", "listener"}, policy_mapping_fn=MODULES))


def _params(algo):
    return jax.device_get(unstack(algo.groups, {g: s.params for g, s in algo.state.items()}))


def _max_diff(a, b):
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
               for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b),
                               strict=True))


def test_joint_rows_pad_agents_of_different_widths(data):
    episodes = read_input(data)[:3]
    agents = ("listener_0", "speaker_0")
    cols, lengths = joint_rows(episodes, agents, global_state=False)
    n = sum(lengths)
    assert cols["obs"].shape == (n, 2, 11) and cols["actions"].shape == (n, 2, 5)
    row = 0
    for ep in sorted(episodes, key=len):
        listener, speaker = (ep.agent_episodes[a] for a in agents)
        for t in range(len(ep)):
            np.testing.assert_array_equal(cols["obs"][row, 1, :3], speaker.get_observations(t))
            np.testing.assert_array_equal(cols["obs"][row, 1, 3:], np.zeros(8))  # padding
            np.testing.assert_array_equal(cols["actions"][row, 1, :3], speaker.get_actions(t))
            np.testing.assert_array_equal(cols["actions"][row, 1, 3:], np.zeros(2))
            np.testing.assert_array_equal(cols["actions"][row, 0], listener.get_actions(t))
            np.testing.assert_array_equal(  # each agent's own observation, unpadded
                cols["global_state"][row], np.concatenate([listener.get_observations(t),
                                                           speaker.get_observations(t)]))
            row += 1
    assert row == n


@pytest.mark.parametrize("use_global_state", [True, False])
def test_two_modules_and_the_critic_train_in_one_compiled_update(data, use_global_state):
    algo = _config(data, use_global_state=use_global_state).learners(num_devices=1).build()
    assert list(algo.groups) == ["listener+speaker"] and algo.module_ids == ["listener",
                                                                             "speaker"]
    before = _params(algo)["listener+speaker"]
    result = algo.train()
    assert len(algo.runtime._compiled) == 1  # one program: both actors and the critic
    after = _params(algo)["listener+speaker"]
    for m in ("speaker", "listener"):
        assert _max_diff(before["policy"][m], after["policy"][m]) > 0
    assert _max_diff(before["q"], after["q"]) > 0
    # the critic's input: the global state (speaker 3 + listener 11) and the joint action
    # (3 + 5): mpe2's state() is the agents' observations side by side
    first_q_layer = after["q"]["params"]
    kernels = [x for x in jax.tree_util.tree_leaves(first_q_layer) if x.ndim == 3]
    assert kernels[0].shape[1] == (3 + 11) + (3 + 5)  # [twin, in, hidden]
    shapes = {m: {x.shape for x in jax.tree_util.tree_leaves(after["policy"][m])}
              for m in ("speaker", "listener")}
    assert {(3, 16), (16, 3)} <= shapes["speaker"]  # its own observation in, message out
    assert {(11, 16), (16, 5)} <= shapes["listener"]
    assert set(result["learners"]) == {"listener+speaker", "__all_modules__"}
    assert result["learners"]["__all_modules__"]["num_agent_steps_trained"] == 2 * 6 * 32


def test_losses_fall_and_each_module_acts_for_its_agent(data):
    algo = _config(data, num_updates_per_iteration=25, alpha=0.0).evaluation(
        evaluation_interval=3, evaluation_duration=2).learners(num_devices=1).build()
    first = algo.train()["learners"]["listener+speaker"]
    algo.train()
    result = algo.train()
    last = result["learners"]["listener+speaker"]
    assert last["qf_loss_mean"] < first["qf_loss_mean"]
    assert last["bc_loss_mean"] < first["bc_loss_mean"]  # alpha 0: pure BC
    metrics = result["evaluation"]["env_runners"]
    assert metrics["num_episodes"] == 2 and metrics["episode_len_mean"] == 8
    assert set(metrics["module_episode_returns_mean"]) == {"speaker", "listener"}
    actors = algo._module_actors()
    speaker = actors["speaker"](np.zeros((1, 3), np.float32), jax.random.PRNGKey(0))
    listener = actors["listener"](np.zeros((1, 11), np.float32), jax.random.PRNGKey(0))
    assert np.shape(speaker) == (1, 3) and np.shape(listener) == (1, 5)
    assert np.all((np.asarray(listener) >= 0) & (np.asarray(listener) <= 1))
    policy = algo.policy("speaker")  # a single-agent policy of the module's actor
    assert policy.spaces.action.shape == (3,)


def test_save_and_restore_resume_exactly(data, tmp_path):
    config = _config(data, actor_q_actions="own")
    assert_resume_is_exact(config, tmp_path, iterations=2, restore_with_config=True)


def test_module_overrides_with_several_modules_are_a_named_error(data):
    config = _config(data).multi_agent(policies={"speaker": {"alpha": 1.0}, "listener": None},
                                       policy_mapping_fn=MODULES)
    with pytest.raises(ConfigError, match=r"one config: drop the overrides of policies "
                                          r"\['speaker'\]"):
        config.build()


@pytest.mark.parametrize("form, share", [("joint", 2), ("own", 1)])
def test_each_agent_weighs_q_against_bc_as_td3_bc(data, form, share):
    """The joint form's Q term has every agent's action, its BC term a mean over the
    agents: `lambda = alpha / (A mean|Q_1|)` keeps TD3+BC's per-agent balance; the "own"
    form's Q term is a mean over the agents already (`alpha / mean|Q_1|`)."""
    algo = _config(data, actor_q_actions=form, alpha=2.5).learners(num_devices=1).build()
    algo.load_data()
    team = "listener+speaker"
    actor = next(loss for loss in algo.modules[team].spec.learning.losses
                 if loss.name == "actor")
    cols = jax.device_get(algo.data[team].columns)
    batch = {k: np.asarray(v)[:64] for k, v in cols.items()}
    batch["loss_mask"] = np.ones(64, np.float32)
    _, out = actor.fn(_params(algo)[team], batch, jax.random.split(jax.random.PRNGKey(0), 64),
                      BatchAxis())
    lam = np.asarray(out["q_lambda"])
    q1 = (np.asarray(out["bc_loss"]) - np.asarray(out["policy_loss"])) / lam
    np.testing.assert_allclose(lam * share * np.mean(np.abs(q1)), 2.5, rtol=1e-4)
