"""PPO over the multi-agent env runner with several modules (`MultiModulePPO`):

* one module through the multi-module program is exactly IPPO's single-module learner
  (`MultiAgentPPO`), same seed, same rollouts;
* three modules of one spec train stacked under `vmap`; `policies_to_train` leaves the
  others exactly unchanged; the team return climbs on the parity task;
* heterogeneous modules (mpe2 speaker-listener: Discrete(3) speaker, Discrete(5) listener)
  step, evaluate, record their episodes (`offline_data(output=...)`) and export per module;
* a `policy_mapping_fn` naming an unknown module is the named one-line error.
"""

import jax
import numpy as np
import pytest
from test_multi_agent_ppo import _config as parity_config

from rljax_offline import PPOConfig
from rljax_offline.algorithms.ppo.multi_agent import MultiAgentPPO
from rljax_offline.algorithms.ppo.multi_module import MultiModulePPO
from rljax_offline.errors import ConfigError


def _speaker_listener(**training):
    return (PPOConfig().environment("mpe2.simple_speaker_listener_v4:parallel_env",
                                    env_config={"max_cycles": 25})
            .multi_agent(policies={"speaker", "listener"},
                         policy_mapping_fn={"speaker_0": "speaker", "listener_0": "listener"})
            .env_runners(num_envs_per_env_runner=2)
            .training(train_batch_size_per_learner=48, minibatch_size=24, num_epochs=2,
                      **training)
            .rl_module(model_config={"fcnet_hiddens": [16]})
            .evaluation(evaluation_duration=2, evaluation_num_envs=2))


def max_diff(a, b) -> float:
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
               for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def test_one_module_in_the_multi_module_program_is_ippos_learner():
    config = parity_config().training(num_epochs=2, minibatch_size=32, use_kl_loss=True)
    ippo, multi = MultiAgentPPO(config), MultiModulePPO(config)
    for _ in range(2):
        ours, theirs = ippo.train(), multi.train()
    assert ours["env_runners"]["episode_return_mean"] == theirs["env_runners"][
        "episode_return_mean"]
    params = jax.device_get(multi.state["default_policy"].params)
    assert max_diff(jax.device_get(ippo.state.params),
                    jax.tree_util.tree_map(lambda x: x[0], params)) < 1e-5
    for key in ("total_loss", "curr_kl_coeff", "vf_explained_var"):
        assert theirs["learners"]["default_policy"][key] == pytest.approx(
            ours["learners"]["default_policy"][key], rel=1e-4, abs=1e-6)
    ippo.stop()
    multi.stop()


def test_three_modules_train_stacked_and_policies_to_train_is_honoured():
    config = parity_config(policies={"a", "b", "c"}, policy_mapping_fn=lambda a, e: a)
    algo = config.build()
    assert isinstance(algo, MultiModulePPO) and list(algo.groups) == ["a"]  # one vmap group
    first = algo.train()
    assert first["learners"]["a"]["num_module_steps_trained"] == 8 * 64
    for _ in range(9):
        last = algo.train()
    assert last["env_runners"]["episode_return_mean"] > first["env_runners"][
        "episode_return_mean"] + 3  # random: 12 of 24
    algo.stop()

    frozen = parity_config(policies={"a", "b", "c"}, policy_mapping_fn=lambda a, e: a,
                           policies_to_train=["b"]).build()
    before = jax.device_get(frozen.state["a"].params)
    result = frozen.train()
    after = jax.device_get(frozen.state["a"].params)
    assert set(result["learners"]) == {"b", "__all_modules__"}
    for i, still in ((0, True), (1, False), (2, True)):
        diff = max_diff(jax.tree_util.tree_map(lambda x, i=i: x[i], before),
                        jax.tree_util.tree_map(lambda x, i=i: x[i], after))
        assert (diff == 0) == still
    frozen.stop()


def test_heterogeneous_modules_step_evaluate_record_and_export(tmp_path):
    from rljax_offline.data.multi_agent_io import read_multi_agent_episodes

    algo = _speaker_listener().offline_data(output=str(tmp_path / "rec")).build()
    assert isinstance(algo, MultiModulePPO) and set(algo.groups) == {"listener", "speaker"}
    assert algo.policy("speaker").spaces.action.n == 3
    assert algo.policy("listener").spaces.action.n == 5
    result = algo.train()
    assert set(result["learners"]) == {"speaker", "listener", "__all_modules__"}
    assert result["env_runners"]["num_env_steps_sampled"] == 50
    evaluation = algo.evaluate()
    assert set(evaluation["module_episode_returns_mean"]) == {"speaker", "listener"}
    assert algo.export_policy("listener", str(tmp_path / "listener"))
    algo.stop()
    sampled = read_multi_agent_episodes(str(tmp_path / "rec" / "sampled"))
    assert len(sampled) == 2 and all(ep.env_steps() == 25 for ep in sampled)
    assert np.mean([ep.get_return() for ep in sampled]) == pytest.approx(
        result["env_runners"]["episode_return_mean"])
    assert len(read_multi_agent_episodes(str(tmp_path / "rec" / "evaluation"))) == 2


def test_a_mapping_to_an_unknown_module_is_a_named_error():
    with pytest.raises(ConfigError, match="maps agent 'speaker_0' to module 'talker', which is "
                                          "not in policies"):
        _speaker_listener().multi_agent(
            policy_mapping_fn={"speaker_0": "talker", "listener_0": "listener"}).build()
