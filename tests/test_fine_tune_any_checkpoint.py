"""PPO fine-tuning (`init_policy_from`) from every registered algorithm's checkpoint: it starts
from the checkpoint's policy weights, or refuses with a one-line `PolicyMismatchError` that says
why and which algorithms can be used (never a raw KeyError). The default run checks
BC (PPO starts from it) and CQL (refused on both action spaces); CI, every name."""

import jax
import numpy as np
import pytest
from learner_testlib import names_with_slow_marks

from rljax_offline import ConfigError, PPOConfig
from rljax_offline.acting.recording import PolicyMismatchError
from rljax_offline.algorithms import registry

SMALL = {"fcnet_hiddens": [8]}
#: (algorithm, env) -> whether PPO can start from its policy
CAN_START = {("cql", "CartPole-v1"): False, ("cql", "Pendulum-v1"): False,
             ("iql", "Pendulum-v1"): False,  # tanh-squashed actor; Discrete CQL: Q-greedy
             ("td3_bc", "Pendulum-v1"): False,  # a deterministic actor
             ("sac", "Pendulum-v1"): False,  # tanh-squashed
             ("rebrac", "Pendulum-v1"): False,  # a deterministic actor
             ("matd3_bc", "Pendulum-v1"): False,  # TD3+BC's actor
             ("awac", "Pendulum-v1"): False, ("crr", "Pendulum-v1"): False,  # squashed
             ("cal_ql", "Pendulum-v1"): False, ("edac", "Pendulum-v1"): False,
             ("bcq", "Pendulum-v1"): False,  # a perturbation of its VAE's actions
             ("discrete_bcq", "CartPole-v1"): False,  # Q-greedy
             ("plas", "Pendulum-v1"): False,  # a deterministic latent actor
             ("plas_with_perturbation", "Pendulum-v1"): False,
             ("bear", "Pendulum-v1"): False}  # candidates drawn from a squashed actor


@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("name", names_with_slow_marks(("bc", "cql")))
def test_ppo_starts_from_every_registered_algorithms_checkpoint_or_says_why(name, env,
                                                                            tmp_path):
    try:
        # one device: a default batch need not divide over the tests' 8 (CRR's is 100)
        src = (registry.config_class(name)().environment(env).rl_module(model_config=SMALL)
               .learners(num_devices=1).build())
    except ConfigError as e:  # the algorithm does not take this env's spaces (TD3+BC: Box)
        pytest.skip(str(e))
    src.save(str(tmp_path / name))
    policy = jax.device_get(src.state.params.get("policy"))
    src.stop()
    config = PPOConfig().environment(env).training(init_policy_from=str(tmp_path / name),
                                                   value_warmup_updates=0)
    if not CAN_START.get((name, env), True):
        with pytest.raises(PolicyMismatchError) as e:
            config.build()
        message = str(e.value)
        assert "\n" not in message and name in message and "bc, marwil, ppo" in message
        return
    ppo = config.build()
    for a, b in zip(jax.tree_util.tree_leaves(policy),
                    jax.tree_util.tree_leaves(jax.device_get(ppo.state.params["policy"])),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    ppo.stop()


def test_iql_with_a_plain_gaussian_actor_starts_ppo(tmp_path):
    from rljax_offline import IQLConfig

    src = (IQLConfig().environment("Pendulum-v1").training(actor_squashed=False)
           .rl_module(model_config=SMALL).build())
    src.save(str(tmp_path / "iql"))
    src.stop()
    ppo = PPOConfig().environment("Pendulum-v1").training(
        init_policy_from=str(tmp_path / "iql"), value_warmup_updates=0).build()
    ppo.stop()
