"""ReBRAC: d3rlpy's names and defaults, the critic's BC penalty on the next step's data action
(left out where the episode has none), the actor's `lambda = 1 / mean|min Q|`, layer-normed
networks, the one-line refusals, exact resume and a short learning run that fails without the
BC penalties.

(8 devices == 1, the three update modes, masked rows, checkpoints: the cross-cutting tests.)"""

import gymnasium as gym
import jax
import numpy as np
import pytest
from offline_rl_testlib import assert_resume_is_exact, evaluation_returns, level, spec_of
from zoo_testlib import (
    assert_export_acts_as_the_algorithm,
    assert_one_line_config_error,
    box_refusals,
    keys,
)

from rljax_offline import spaces as sp
from rljax_offline.acting.env_runner import record_expert
from rljax_offline.algorithms.rebrac import ReBRACConfig
from rljax_offline.connectors.learner import add_next_actions
from rljax_offline.episode.batch import EpisodeBatch
from rljax_offline.learning.init import init_state
from rljax_offline.learning.update import BatchAxis
from rljax_offline.models.initializers import TORCH_DEFAULT
from rljax_offline.models.networks import continuous_q_network, ensemble, mlp_network

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
ACT = gym.spaces.Box(-2, 2, (1,), np.float32)
SMALL = {"fcnet_hiddens": [32, 32]}
N = 64


def small(**training):
    return ReBRACConfig().training(**training).rl_module(model_config=SMALL)


def random_batch(n=N, seed=0):
    rng = np.random.default_rng(seed)
    return {"obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            "new_obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            "actions": rng.uniform(-2, 2, (n, 1)).astype(np.float32),
            "next_actions": rng.uniform(-2, 2, (n, 1)).astype(np.float32),
            "next_actions_valid": (np.arange(n) % 5 != 0).astype(np.float32),
            "rewards": rng.normal(size=n).astype(np.float32),
            "terminateds": rng.random(n) < 0.1,
            "loss_mask": np.ones(n, np.float32)}


def test_d3rlpy_defaults_and_layer_normed_networks():
    c = ReBRACConfig()
    assert (c.actor_beta, c.critic_beta, c.actor_lr, c.critic_lr) == (1e-3, 1e-2, 1e-3, 1e-3)
    assert (c.train_batch_size_per_learner, c.gamma, c.tau, c.n_critics) == (1024, 0.99,
                                                                             0.005, 2)
    assert (c.target_smoothing_sigma, c.target_smoothing_clip, c.update_actor_interval,
            c.normalize_observations, c.algo_name) == (0.2, 0.5, 2, False, "rebrac")
    assert c.model_config == {"fcnet_hiddens": [256, 256, 256], "fcnet_activation": "relu",
                              "fcnet_use_layernorm": True,
                              "fcnet_layernorm_placement": "after_activation", **TORCH_DEFAULT}
    params = init_state(spec_of(c, OBS, ACT).learning, 0).params
    assert sorted(params["q"]["params"]) == ["Dense_0", "Dense_1", "Dense_2", "Dense_3",
                                             "LayerNorm_0", "LayerNorm_1", "LayerNorm_2"]
    assert params["q"]["params"]["Dense_0"]["kernel"].shape == (2, 4, 256)  # two critics


@pytest.mark.parametrize("placement", ["before_activation", "after_activation"])
def test_layer_norm_sits_before_or_after_the_relu(placement):
    """RLlib's place (before the activation: some outputs of a hidden layer negative before
    the ReLU, so after the norm a layer's features are >= 0) or d3rlpy's and CORL's (after:
    each row of features normalized, mean 0)."""
    from flax import linen as nn

    from rljax_offline.models.encoders import dense_stack
    from rljax_offline.models.initializers import LayerInits

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x):
            return dense_stack(x, (8,), "relu", LayerInits(), placement)

    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    out = np.asarray(Stack().apply(Stack().init(jax.random.PRNGKey(0), x), x))
    if placement == "before_activation":
        assert out.min() == 0.0 and np.all(out >= 0)
    else:
        np.testing.assert_allclose(out.mean(axis=1), 0.0, atol=1e-5)
        assert out.min() < 0


@pytest.mark.parametrize("change, spaces, message", [
    *box_refusals("ReBRACConfig"),
    (lambda c: c.training(n_critics=0), None, "n_critics must be"),
    (lambda c: c.rl_module(model_config={"fcnet_layernorm_placement": "inside"}), None,
     "fcnet_layernorm_placement must be one of"),
])
def test_what_it_cannot_do_is_a_one_line_config_error(change, spaces, message):
    assert_one_line_config_error(ReBRACConfig(), change, spaces, message)


def test_next_actions_are_the_episodes_next_step_and_invalid_at_its_end():
    space = gym.spaces.Box(-2, 2, (1,), np.float32)
    actions = np.arange(8, dtype=np.float32).reshape(2, 4, 1)
    episodes = EpisodeBatch(
        observations=np.zeros((2, 5, 3), np.float32), actions=actions,
        rewards=np.zeros((2, 4), np.float32), extra_model_outputs={},
        lengths=np.array([4, 2]), lookback_lengths=np.zeros(2, int),
        t_started=np.zeros(2, int), terminated=np.array([True, False]),
        truncated=np.array([False, True]), max_len=4, len_lookback_buffer=0,
        observation_space_spec=OBS, action_space_spec=space)
    _, out, _ = add_next_actions().apply((), episodes, {"actions": actions.reshape(8, 1)}, None)
    np.testing.assert_array_equal(out["next_actions"][:, 0], [1, 2, 3, 0, 5, 0, 0, 0])
    np.testing.assert_array_equal(out["next_actions_valid"], [1, 1, 1, 0, 1, 0, 0, 0])


def test_critic_target_subtracts_the_bc_penalty_on_the_next_data_action():
    """With no smoothing noise, the TD target is `r + 0.99 (1 - d) (min Q'(s', pi'(s')) -
    critic_beta |pi'(s') - a'_D|^2)` in the unit box, the penalty 0 where no next action."""
    config = small(target_smoothing_sigma=0.0, critic_beta=0.5)
    spec = spec_of(config, OBS, ACT)
    params = jax.device_get(init_state(spec.learning, 0).params)
    batch = random_batch()
    critic = next(loss for loss in spec.learning.losses if loss.name == "critic")
    _, metrics = critic.fn(params, batch, keys(), BatchAxis())
    policy = mlp_network(sp.to_spec(OBS), 1, config.model_config)
    q = ensemble(continuous_q_network(sp.to_spec(OBS), sp.to_spec(ACT), config.model_config), 2)
    unit = np.tanh(np.asarray(policy.apply(params["target_policy"], batch["new_obs"])))
    next_q = np.min(q.apply(params["target_q"], batch["new_obs"], 2.0 * unit), axis=0)
    penalty = batch["next_actions_valid"] * np.sum((unit - batch["next_actions"] / 2) ** 2, -1)
    y = batch["rewards"] + 0.99 * (1 - batch["terminateds"]) * (next_q - 0.5 * penalty)
    np.testing.assert_allclose(metrics["td_target_mean"], y, rtol=1e-5, atol=1e-5)
    assert np.all(penalty[batch["next_actions_valid"] == 0] == 0) and penalty.max() > 0


def test_losses_do_not_depend_on_the_action_units():
    """The critics take the action in the unit box, as d3rlpy's do behind its
    MinMaxActionScaler: on a `[-2, 2]` Box both losses and the TD targets are those of the
    same data rescaled to a `[-1, 1]` Box, to float rounding."""
    unit_space = gym.spaces.Box(-1, 1, (1,), np.float32)
    batch = random_batch()
    halved = {**batch, "actions": batch["actions"] / 2, "next_actions": batch["next_actions"] / 2}

    def losses(space, data):
        spec = spec_of(small(), OBS, space)
        params = jax.device_get(init_state(spec.learning, 0).params)
        return {loss.name: loss.fn(params, data, keys(), BatchAxis())
                for loss in spec.learning.losses}

    env_units, unit_box = losses(ACT, batch), losses(unit_space, halved)
    for name in ("critic", "actor"):
        np.testing.assert_allclose(env_units[name][0], unit_box[name][0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(env_units["critic"][1]["td_target_mean"],
                               unit_box["critic"][1]["td_target_mean"], rtol=1e-6, atol=1e-6)
    assert not np.allclose(losses(ACT, halved)["critic"][0], env_units["critic"][0])


@pytest.fixture(scope="module")
def pendulum_expert(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("pendulum"))
    record_expert("Pendulum-v1", path, num_episodes=10, progress=False)
    return path


def pendulum_config(data, updates, **training):
    return (ReBRACConfig().environment("Pendulum-v1").offline_data(input_=data)
            .training(num_updates_per_iteration=updates, train_batch_size_per_learner=256,
                      **training)
            .rl_module(model_config={"fcnet_hiddens": [64, 64]}).learners(num_devices=1)
            .evaluation(evaluation_interval=1, evaluation_duration=10).debugging(seed=0))


def test_resume_is_exact(pendulum_expert, tmp_path):
    assert_resume_is_exact(pendulum_config(pendulum_expert, 4).evaluation(
        evaluation_interval=0), tmp_path)


@pytest.mark.slow
def test_learns_pendulum_from_expert_data_with_its_bc_penalties(pendulum_expert):
    """Expert-only Pendulum data (narrow coverage: the case the penalties are for), CORL's
    penalty weights (1.0, 1.0), 3,000 updates of batch 256: the level (mean of the last two
    evaluations) clears -600 (measured -272; the expert is about -150, random torques -1,200
    to -1,500). Without the penalties (both betas 0: offline TD3) the same run's level is
    -1,068."""
    returns = evaluation_returns(pendulum_config(pendulum_expert, 1000, actor_beta=1.0,
                                                 critic_beta=1.0), 3)
    assert level(returns) >= -600, returns


def test_exported_policy_acts_as_the_algorithm(pendulum_expert, tmp_path):
    algo = pendulum_config(pendulum_expert, 2).rl_module(
        model_config={"fcnet_hiddens": [16]}).evaluation(evaluation_interval=0).build()
    algo.train()
    assert_export_acts_as_the_algorithm(algo, tmp_path / "policy.stablehlo")
    algo.stop()
