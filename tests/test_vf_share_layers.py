"""`vf_share_layers` (RLlib's one encoder under the policy and the value head) and RLlib's
`DefaultModelConfig`. The cross-cutting tests (modes agree, 8 devices == 1 in float64, masked
rows, exact resume) run PPO and MARWIL with shared layers too (`learner_testlib`'s
`-shared` cases); here: the structure, the gradients, export, and cloning a shared-layers
PPO expert into BC and back into PPO."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax_offline import (
    BCConfig,
    ConfigError,
    DefaultModelConfig,
    MARWILConfig,
    PPOConfig,
    record_policy,
)
from rljax_offline import spaces as sp
from rljax_offline.models.actor_critic import critic
from rljax_offline.models.policy import make_policy
from rljax_offline.ope import estimate

SHARED = DefaultModelConfig(fcnet_hiddens=[32], fcnet_activation="linear",
                            vf_share_layers=True)
OBS = sp.to_spec(__import__("gymnasium").spaces.Box(-5, 5, (4,), np.float32))
ACT = sp.to_spec(__import__("gymnasium").spaces.Discrete(2))


def test_default_model_config_has_rllibs_names_and_defaults():
    c = DefaultModelConfig()
    assert (c.fcnet_hiddens, c.fcnet_activation, c.vf_share_layers, c.head_fcnet_hiddens,
            c.free_log_std, c.log_std_clip_param, c.use_lstm, c.max_seq_len,
            c.lstm_cell_size) == ([256, 256], "tanh", True, [], False, 20.0, False, 20, 256)
    # the dataclass replaces the whole model config; a dict merges into the current one
    config = PPOConfig().rl_module(model_config={"fcnet_hiddens": [8]}).rl_module(
        model_config=DefaultModelConfig(fcnet_hiddens=[32]))
    assert config.model_config["fcnet_hiddens"] == [32]
    assert config.model_config["vf_share_layers"] is True
    merged = PPOConfig().rl_module(model_config={"vf_share_layers": True})
    assert merged.model_config["fcnet_hiddens"] == [256, 256]
    assert PPOConfig.from_dict(config.to_dict()).model_config == config.model_config


@pytest.mark.parametrize("model_config, message", [
    (DefaultModelConfig(head_fcnet_hiddens=[64]), "head_fcnet_hiddens=[64] is not supported"),
    (DefaultModelConfig(free_log_std=True), "free_log_std=True is not supported"),
    ({"vf_share_layers": "yes"}, "vf_share_layers must be True or False"),
    ({"vf_share_layers": True, "use_lstm": True}, "vf_share_layers=True with use_lstm"),
    ({"vf_shared_layers": True}, "unknown model_config keys ['vf_shared_layers']"),
])
def test_what_is_not_built_is_a_named_error(model_config, message):
    with pytest.raises(ConfigError) as e:
        PPOConfig().rl_module(model_config=model_config)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_shared_value_is_a_head_on_the_policys_trunk_and_its_loss_trains_the_trunk():
    """params["policy"] has the separate policy's shapes; params["value"] is one linear
    layer on the trunk's 32 features; the value's gradient reaches the policy's hidden layer
    with shared layers and not without."""
    rng = jax.random.PRNGKey(0)
    obs = jax.random.normal(rng, (16, 4))
    grads = {}
    for shared in (True, False):
        mc = {"fcnet_hiddens": [32], "fcnet_activation": "relu", "vf_share_layers": shared}
        policy, value = make_policy(OBS, ACT, **mc), critic(OBS, mc)
        params = {"policy": policy.init(rng), "value": value.init(rng)}
        shapes = jax.tree_util.tree_map(np.shape, params["policy"])
        assert shapes == jax.tree_util.tree_map(
            np.shape, make_policy(OBS, ACT, fcnet_hiddens=[32]).init(rng))
        if shared:
            assert jax.tree_util.tree_map(np.shape, params["value"]) == {
                "params": {"Dense_0": {"kernel": (32, 1), "bias": (1,)}}}
        assert value.apply(params, obs).shape == (16,)
        grads[shared] = jax.grad(lambda p, v=value: jnp.sum(v.apply(p, obs) ** 2))(params)
    hidden = lambda g: np.abs(np.asarray(g["policy"]["params"]["Dense_0"]["kernel"])).sum()
    assert hidden(grads[True]) > 0 and hidden(grads[False]) == 0


def test_shared_layers_on_images_share_the_cnn():
    import gymnasium as gym

    obs_spec = sp.to_spec(gym.spaces.Box(0, 255, (16, 16, 3), np.uint8))
    mc = {"vf_share_layers": True, "conv_filters": [[4, [4, 4], 2], [8, [4, 4], 2]]}
    policy, value = make_policy(obs_spec, ACT, **mc), critic(obs_spec, mc)
    rng = jax.random.PRNGKey(1)
    params = {"policy": policy.init(rng), "value": value.init(rng)}
    frames = np.zeros((2, 16, 16, 3), np.uint8)
    assert value.apply(params, frames).shape == (2,)
    g = jax.grad(lambda p: jnp.sum(value.apply(p, frames + 1) ** 2))(params)
    assert any(np.abs(np.asarray(x)).sum() > 0
               for x in jax.tree_util.tree_leaves(g["policy"]["params"]["encoder"]))


@pytest.mark.slow
def test_marwil_with_shared_layers_learns_its_value_head(tmp_path):
    """MARWIL's value head rides on the policy's encoder: its loss falls."""
    from rljax_offline import record_expert

    data = str(tmp_path / "data")
    record_expert("CartPole-v1", data, num_episodes=20, seed=0)
    algo = (MARWILConfig().environment("CartPole-v1").offline_data(input_=data)
            .training(num_updates_per_iteration=200, lr=1e-3)
            .evaluation(evaluation_interval=0)
            .rl_module(model_config={"fcnet_hiddens": [32], "vf_share_layers": True}).build())
    first = algo.train()["learners"]["default_policy"]["vf_loss"]
    for _ in range(5):  # measured: 3369 -> 729 (separate networks: 3398 -> 617)
        last = algo.train()["learners"]["default_policy"]["vf_loss"]
    assert last < 0.4 * first
    assert set(algo.state.params["value"]["params"]) == {"Dense_0"}
    algo.stop()


@pytest.fixture(scope="module")
def shared_ppo(tmp_path_factory):
    """A shared-layers PPO after two iterations, saved."""
    path = str(tmp_path_factory.mktemp("ppo") / "ppo")
    algo = (PPOConfig().environment("CartPole-v1")
            .training(train_batch_size_per_learner=512, minibatch_size=128, num_epochs=2,
                      lr=3e-4, vf_loss_coeff=0.01)
            .rl_module(model_config=SHARED).build())
    algo.train()
    algo.train()
    algo.save(path)
    return algo, path


def test_shared_layers_ppo_exports_the_policy_it_acts_with(shared_ppo, tmp_path):
    from rljax_offline import load_stablehlo

    algo, _ = shared_ppo
    path = algo.export_policy(str(tmp_path / "policy"))
    obs = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    exported, _ = load_stablehlo(path)(obs)
    np.testing.assert_array_equal(np.asarray(exported).reshape(-1),
                                  algo.compute_actions(obs).reshape(-1))


def test_shared_layers_ppo_resumes_exactly(shared_ppo, tmp_path):
    algo, path = shared_ppo
    restored = PPOConfig.from_dict(algo.config.to_dict()).build()
    restored.restore(path)
    for a, b in zip(jax.tree_util.tree_leaves(jax.device_get(algo.state)),
                    jax.tree_util.tree_leaves(jax.device_get(restored.state)), strict=True):
        np.testing.assert_array_equal(a, b)
    restored.stop()


def test_shared_ppo_clones_into_bc_and_bc_starts_shared_ppo(shared_ppo, tmp_path):
    """The guide's rule: BC takes the expert's model_config. BC's checkpoint then starts a
    shared-layers PPO: its policy unchanged by the value warm-up (the head fits on the frozen
    trunk)."""
    _, path = shared_ppo
    data = str(tmp_path / "recorded")
    record_policy("CartPole-v1", path, data, num_episodes=10, seed=0)
    bc = (BCConfig().environment("CartPole-v1").offline_data(input_=data)
          .training(num_updates_per_iteration=20).evaluation(evaluation_interval=0)
          .rl_module(model_config=SHARED).build())
    bc.train()
    bc.save(str(tmp_path / "bc"))
    bc_policy = jax.device_get(bc.state.params["policy"])
    bc.stop()
    wis = estimate(str(tmp_path / "bc"), data, ["wis"])["wis"]  # OPE of the clone
    assert wis["num_episodes"] == 10 and np.isfinite(wis["v_behavior"])
    ppo = PPOConfig().environment("CartPole-v1").training(
        init_policy_from=str(tmp_path / "bc"), value_warmup_updates=50).build()
    assert ppo.config.model_config["vf_share_layers"] is True
    for a, b in zip(jax.tree_util.tree_leaves(bc_policy),
                    jax.tree_util.tree_leaves(jax.device_get(ppo.state.params["policy"])),
                    strict=True):
        np.testing.assert_array_equal(a, b)
    assert ppo.warmup_metrics["vf_loss"] > 0
    ppo.stop()
