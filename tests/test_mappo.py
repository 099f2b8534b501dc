"""MAPPO: `PPOConfig().training(centralized_value=True).multi_agent(...)`.

* the value network's input is the global state: the env's `state()` (mpe2 speaker-listener:
  14 = 3 + 11) or every agent's observation concatenated (an env without `state()`);
* agent i's value changes when another agent's observation changes, and with IPPO it does
  not;
* a checkpoint restores and goes on exactly; acting and export need the actor alone;
* a single-agent config, a shared-layers or recurrent value: named one-line errors.
"""

import jax
import numpy as np
import pytest
from test_multi_agent_ppo import ParityEnv
from test_multi_agent_ppo import _config as parity_config
from test_multi_module_ppo import max_diff

from rljax_offline import PPOConfig
from rljax_offline.algorithms.algorithm import Algorithm
from rljax_offline.algorithms.ppo.multi_module import MultiModulePPO
from rljax_offline.errors import ConfigError


class ShiftedParityEnv(ParityEnv):
    """`ParityEnv` whose agent `c` sees its observation halved: `a`'s and `b`'s steps are
    the same, the concatenated observations are not."""

    def _obs(self):
        obs = super()._obs()
        if "c" in obs:
            obs["c"] = obs["c"] * np.float32(0.5)
        return obs


def _value_kernel(algo, group):
    return jax.device_get(algo.state[group].params["value"])["params"]["Dense_0"]["kernel"]


def test_the_value_reads_the_global_state():
    algo = parity_config().training(centralized_value=True).build()
    assert isinstance(algo, MultiModulePPO)
    assert _value_kernel(algo, "default_policy").shape == (1, 6, 32)  # 3 agents x 2
    assert "global_state" in algo.modules["default_policy"].pipelines.columns
    algo.stop()
    sl = (PPOConfig().environment("mpe2.simple_speaker_listener_v4:parallel_env")
          .multi_agent(policies={"speaker", "listener"},
                       policy_mapping_fn={"speaker_0": "speaker", "listener_0": "listener"})
          .training(centralized_value=True, train_batch_size_per_learner=48,
                    minibatch_size=24).rl_module(model_config={"fcnet_hiddens": [8]}).build())
    assert sl.global_state.env_state and sl.global_state.dim == 14
    assert {g: _value_kernel(sl, g).shape for g in sl.groups} == {
        "speaker": (1, 14, 8), "listener": (1, 14, 8)}
    assert sl.policy("speaker").spaces.observation.shape == (3,)  # the actor: its own obs
    sl.stop()


def _agent_a_values(env_class, centralized: bool) -> np.ndarray:
    config = (parity_config(policies={"a", "b", "c"}, policy_mapping_fn=lambda a, e: a)
              .environment(lambda cfg: env_class())
              .training(centralized_value=centralized))
    algo = config.build()
    by_module, _ = algo.sample()
    columns, _ = algo._columns(by_module)
    algo.stop()
    return columns["a"]["vf_preds"], columns["a"]["obs"]


@pytest.mark.parametrize("centralized", [True, False])
def test_agent_values_see_other_agents_only_with_a_centralized_value(centralized):
    values, obs = _agent_a_values(ParityEnv, centralized)
    shifted, shifted_obs = _agent_a_values(ShiftedParityEnv, centralized)
    assert np.array_equal(obs, shifted_obs)  # agent a's own observations are the same
    assert (np.max(np.abs(values - shifted)) > 1e-4) == centralized


def test_a_checkpoint_restores_and_continues_exactly(tmp_path):
    config = parity_config().training(centralized_value=True, num_epochs=2)
    algo = config.build()
    algo.train()
    algo.save(str(tmp_path / "ckpt"))
    back = Algorithm.from_checkpoint(str(tmp_path / "ckpt"), config)
    assert isinstance(back, MultiModulePPO) and back.iteration == 1
    algo._close_sampling()  # envs are not in a checkpoint: both go on from new ones
    ours, theirs = algo.train(), back.train()
    assert max_diff(jax.device_get(algo.state), jax.device_get(back.state)) == 0
    assert ours["learners"]["default_policy"]["total_loss"] == theirs["learners"][
        "default_policy"]["total_loss"]
    assert theirs["num_env_steps_sampled_lifetime"] == 2 * 64
    assert back.export_policy("default_policy", str(tmp_path / "actor"))
    algo.stop()
    back.stop()


def test_what_mappo_refuses_is_a_named_error():
    with pytest.raises(ConfigError, match="is a multi-agent option"):
        PPOConfig().environment("CartPole-v1").training(centralized_value=True).build()
    with pytest.raises(ConfigError, match="feed-forward value network of its own"):
        parity_config().training(centralized_value=True).rl_module(
            model_config={"vf_share_layers": True}).build()
