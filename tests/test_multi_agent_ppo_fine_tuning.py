"""Multi-agent PPO started from a multi-agent offline checkpoint (`init_policy_from`): each
module takes the policy weights of the checkpoint's module of the same id, exactly, and
trains on; IPPO's one shared module likewise; what cannot start is a one-line named error."""

import jax
import numpy as np
import pytest

from rljax_offline import BCConfig, CQLConfig, PPOConfig
from rljax_offline.acting.multi_agent_runner import MultiAgentEnvRunner, random_policy
from rljax_offline.acting.recording import PolicyMismatchError
from rljax_offline.algorithms.ppo.multi_agent import MultiAgentPPO
from rljax_offline.algorithms.ppo.multi_module import MultiModulePPO
from rljax_offline.envs.make import multi_agent_env_factory
from rljax_offline.errors import ConfigError
from tests.test_multi_module_ppo import max_diff

LISTENER = "mpe2.simple_speaker_listener_v4:parallel_env"
MAPPING = {"speaker_0": "speaker", "listener_0": "listener"}
MODEL = {"fcnet_hiddens": [16]}


def _record(env: str, path: str, modules: dict) -> str:
    env_fn = multi_agent_env_factory(env, {})
    probe = env_fn()
    policies = {m: random_policy(probe.action_space(a)) for a, m in modules.items()}
    runner = MultiAgentEnvRunner(env_fn, policies, agent_to_module_mapping_fn=modules,
                                 num_envs=2)
    runner.record(path, num_episodes=2)
    return path


def _offline(config, env, data, policies, mapping, train=True):
    algo = (config.environment(env).multi_agent(policies=policies, policy_mapping_fn=mapping)
            .offline_data(input_=data).rl_module(model_config=MODEL)
            .training(train_batch_size_per_learner=32, num_updates_per_iteration=2).build())
    if train:  # else saved as initialised: what the refusal reads is the same
        algo.train()
    return algo


def _ppo(env, policies, mapping, **training):
    return (PPOConfig().environment(env).multi_agent(policies=policies,
                                                     policy_mapping_fn=mapping)
            .env_runners(num_envs_per_env_runner=2).rl_module(model_config=MODEL)
            .training(train_batch_size_per_learner=48, minibatch_size=24, num_epochs=1,
                      **training))


@pytest.mark.slow
def test_two_modules_start_from_a_bc_checkpoint(tmp_path):
    data = _record(LISTENER, str(tmp_path / "data"), MAPPING)
    bc = _offline(BCConfig(), LISTENER, data, {"speaker", "listener"}, MAPPING)
    bc.save(str(tmp_path / "bc"))
    config = _ppo(LISTENER, {"speaker", "listener"}, MAPPING,
                  init_policy_from=str(tmp_path / "bc"))
    with pytest.raises(ConfigError, match="set value_warmup_updates=0"):
        config.build()
    ppo = config.training(value_warmup_updates=0).build()
    assert isinstance(ppo, MultiModulePPO)
    for m in ("speaker", "listener"):
        assert max_diff(ppo.policy(m).params["policy"], bc.policy(m).params["policy"]) == 0
    result = ppo.train()
    assert result["fine_tuned_from"] == str(tmp_path / "bc")
    ppo.stop()
    bc.stop()

    cql = _offline(CQLConfig(), LISTENER, data, {"speaker", "listener"}, MAPPING, train=False)
    cql.save(str(tmp_path / "cql"))
    with pytest.raises(PolicyMismatchError, match="module 'listener'.*no policy network"):
        _ppo(LISTENER, {"speaker", "listener"}, MAPPING, init_policy_from=str(
            tmp_path / "cql"), value_warmup_updates=0).build()
    cql.stop()


def test_the_shared_module_starts_from_a_shared_bc_checkpoint(tmp_path):
    env = "mpe2.simple_spread_v3:parallel_env"
    shared = {f"agent_{i}": "default_policy" for i in range(3)}
    data = _record(env, str(tmp_path / "data"), shared)
    bc = _offline(BCConfig(), env, data, {"default_policy"}, shared)
    bc.save(str(tmp_path / "bc"))
    ppo = _ppo(env, {"default_policy"}, shared, init_policy_from=str(tmp_path / "bc"),
               value_warmup_updates=0).build()
    assert isinstance(ppo, MultiAgentPPO)
    assert max_diff(jax.device_get(ppo.state.params["policy"]),
                    bc.policy("default_policy").params["policy"]) == 0
    assert np.isfinite(ppo.train()["learners"]["default_policy"]["total_loss"])
    ppo.stop()
    bc.stop()
