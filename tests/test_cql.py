"""CQL: RLlib's names and defaults, the conservative term, the actor's BC warm-up, the
Lagrangian weight, hard target copies (Discrete), named errors, exact resume.

(8 devices == 1 and the three update modes: `learner_testlib.ALGORITHM_CASES`.)"""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from offline_rl_testlib import assert_resume_is_exact, run_updates, spec_of

from rljax_offline import CQLConfig
from rljax_offline import spaces as sp
from rljax_offline.algorithms.config import ConfigError
from rljax_offline.apps.recipes import record_mixed
from rljax_offline.learning.init import init_state
from rljax_offline.learning.update import BatchAxis
from rljax_offline.models.actor_and_q import actor, q_ensemble

OBS = gym.spaces.Box(-1, 1, (2,), np.float32)
BOX = gym.spaces.Box(-2, 2, (1,), np.float32)
DISCRETE = gym.spaces.Discrete(3)
SMALL = {"fcnet_hiddens": [32, 32]}
N = 128


def terminal_batch(actions, seed=0):
    """One-step episodes with reward 0: every action's true value is 0, and the data holds
    only `actions`."""
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (N, 2)).astype(np.float32)
    return {"obs": obs, "new_obs": obs, "actions": actions, "rewards": np.zeros(N, np.float32),
            "terminateds": np.ones(N, bool)}


def test_defaults():
    """RLlib's, except bc_iters (0, d3rlpy's; cql.py's docstring) and the Discrete weight and
    critic rate."""
    c = CQLConfig()
    assert (c.bc_iters, c.temperature, c.num_actions, c.lagrangian, c.lagrangian_thresh,
            c.deterministic_backup) == (0, 1.0, 10, False, 5.0, True)
    # min_q_weight and critic_lr resolve per action space: RLlib's for Box.
    assert (c.min_q_weight, c.critic_lr) == (None, None)
    assert c.resolved(discrete=False) == (5.0, 1e-3)
    assert c.resolved(discrete=True) == (1.0, 3e-4)
    assert CQLConfig().training(min_q_weight=2.0, critic_lr=1e-2).resolved(True) == (2.0, 1e-2)
    assert (c.actor_lr, c.alpha_lr, c.lr) == (1e-4, 1e-3, None)
    assert (c.tau, c.twin_q, c.initial_alpha, c.target_entropy, c.gamma) == (
        5e-3, True, 1.0, "auto", 0.99)
    assert c.train_batch_size_per_learner == 256 and c.algo_name == "cql"


@pytest.mark.parametrize("kwargs, message", [
    ({"lr": 1e-3}, "lr is not used"), ({"min_q_weight": -1.0}, "min_q_weight must be"),
    ({"num_actions": 0}, "num_actions must be a positive int"),
    ({"target_entropy": "high"}, "target_entropy must be"), ({"tau": 0.0}, "tau must be"),
    ({"lagrangian": 1}, "lagrangian must be True or False"), ({"bogus": 1}, "unknown key"),
    ({"mean_action_backup": True, "deterministic_backup": False},
     "mean_action_backup=True needs deterministic_backup=True"),
    ({"alpha_prime_lr": 1e-4}, "alpha_prime_lr is the Lagrangian weight's: set lagrangian=True"),
    ({"alpha_prime_lr": 0.0, "lagrangian": True}, "alpha_prime_lr must be"),
])
def test_bad_values_are_one_line_named_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message) as e:
        CQLConfig().training(**kwargs)
    assert "\n" not in str(e.value)


def test_unbounded_box_actions_are_refused_before_compiling():
    with pytest.raises(ConfigError, match="finite bounds"):
        spec_of(CQLConfig(), OBS, gym.spaces.Box(-np.inf, np.inf, (1,), np.float32))
    with pytest.raises(ConfigError, match="Discrete and Box"):
        spec_of(CQLConfig(), OBS, gym.spaces.MultiDiscrete([2, 2]))
    with pytest.raises(ConfigError, match="mean_action_backup is for Box actions"):
        spec_of(CQLConfig().training(mean_action_backup=True), OBS, DISCRETE)


def test_discrete_cql_pushes_unseen_actions_down():
    cfg = CQLConfig().training(critic_lr=3e-3).rl_module(model_config=SMALL)
    spec = spec_of(cfg, OBS, DISCRETE)
    state, metrics = run_updates(spec, terminal_batch(np.zeros(N, np.int64)), 150)
    q = np.asarray(spec.acting.act(state.params, jnp.asarray(terminal_batch(None)["obs"])))
    # Q of the data's action is near its true value 0; the unseen ones are pushed below it.
    assert np.all(q[:, 1:] < q[:, :1] - 0.5), q[:4]
    assert abs(float(np.mean(q[:, 0]))) < 1.0
    assert set(metrics) >= {"qf_loss", "cql_loss", "critic_loss", "gradients_qf_global_norm"}


@pytest.mark.parametrize("act_space, weight, lr", [(DISCRETE, 1.0, 3e-4), (BOX, 5.0, 1e-3)])
def test_default_weight_and_critic_lr_are_the_action_spaces(act_space, weight, lr):
    """Discrete CQL at RLlib's Box values (weight 5, lr 1e-3) reaches the expert on the mixed
    CartPole set and then collapses (cql.py's docstring): its defaults are 1.0 and 3e-4."""
    discrete = act_space is DISCRETE
    actions = np.zeros(N, np.int64) if discrete else np.zeros((N, 1), np.float32)
    batch = terminal_batch(actions)

    def first_update(cfg):
        spec = spec_of(cfg.training(bc_iters=0).rl_module(model_config=SMALL), OBS, act_space)
        (start, _), (one, metrics) = run_updates(spec, batch, 0, 1)
        step = jax.tree_util.tree_map(lambda a, b: np.max(np.abs(a - b)), one.params["q"],
                                      start.params["q"])
        return float(metrics["cql_loss"]), max(jax.tree_util.tree_leaves(step))

    cql, step = first_update(CQLConfig())
    if not discrete:  # no BC warm-up by default: the first actor update is SAC's
        spec = spec_of(CQLConfig().rl_module(model_config=SMALL), OBS, BOX)
        assert float(run_updates(spec, batch, 1)[1]["bc_phase"]) == 0.0
    cql_unit, _ = first_update(CQLConfig().training(min_q_weight=1.0))
    # The regulariser is weighted by the default weight; Adam's first step moves the
    # parameters most by the learning rate (to float rounding).
    assert cql == pytest.approx(weight * cql_unit, rel=1e-5)
    assert step == pytest.approx(lr, rel=1e-3)


def test_discrete_targets_are_hard_copies_every_period():
    cfg = CQLConfig().training(target_network_update_freq=3).rl_module(model_config=SMALL)
    spec = spec_of(cfg, OBS, DISCRETE)
    batch = terminal_batch(np.zeros(N, np.int64))
    (start, _), (two, _), (three, _) = run_updates(spec, batch, 1, 2, 3)
    assert np.array_equal(first_leaf(two.params["target_q"]), first_leaf(start.params["target_q"]))
    assert not np.array_equal(first_leaf(two.params["target_q"]), first_leaf(two.params["q"]))
    assert np.array_equal(first_leaf(three.params["target_q"]), first_leaf(three.params["q"]))


def first_leaf(tree):
    return np.asarray(jax.tree_util.tree_leaves(tree)[0])


def box_q(cfg, params, obs, actions):
    q = q_ensemble(sp.to_spec(OBS), sp.to_spec(BOX), cfg.model_config, cfg.twin_q)
    return np.asarray(q.apply(params["q"], jnp.asarray(obs), jnp.asarray(actions))).min(0)


def test_box_cql_values_data_actions_above_others_and_warms_up_with_bc():
    cfg = CQLConfig().training(bc_iters=100, actor_lr=3e-3, critic_lr=3e-3,
                               num_actions=4).rl_module(model_config=SMALL)
    spec = spec_of(cfg, OBS, BOX)
    batch = terminal_batch(np.full((N, 1), 1.5, np.float32))
    (state, metrics), (later, later_metrics) = run_updates(spec, batch, 100, 101)
    assert float(metrics["bc_phase"]) == 1.0
    # After the warm-up the actor imitates the data: its greedy action is near 1.5.
    acting = spec.acting
    greedy = np.asarray(acting.dist.greedy(acting.act(state.params, jnp.asarray(batch["obs"]))))
    # (It starts near 0; the entropy term keeps it from fitting exactly in 100 steps.)
    assert np.mean(np.abs(greedy - 1.5)) < 0.35 and np.all(greedy > 0.7), greedy[:4]
    assert np.all(np.abs(greedy) <= 2.0)
    q_data = box_q(cfg, state.params, batch["obs"], batch["actions"])
    q_other = box_q(cfg, state.params, batch["obs"], np.full((N, 1), -1.5, np.float32))
    assert np.all(q_other < q_data - 0.5), (q_data[:4], q_other[:4])
    assert float(later_metrics["bc_phase"]) == 0.0 and int(later.extra["num_actor_updates"]) == 101


def test_lagrangian_weight_falls_when_the_gap_is_under_the_threshold():
    cfg = CQLConfig().training(lagrangian=True, lagrangian_thresh=1e3, bc_iters=0,
                               num_actions=2).rl_module(model_config=SMALL)
    spec = spec_of(cfg, OBS, BOX)
    (_, m1), (_, m20) = run_updates(spec, terminal_batch(np.zeros((N, 1), np.float32)),
                                    1, 20)
    assert float(m20["alpha_prime"]) < float(m1["alpha_prime"]) <= 1.0


# d3rlpy's CQL options: the multiplier with an Adam state of its own, the mean-action target.
D3RLPY_OPTIONS = {"lagrangian": True, "alpha_prime_lr": 1e-4, "mean_action_backup": True}


@pytest.mark.parametrize("recipe, episodes, options", [
    ("cartpole-mixed-small", 20, {}), ("pendulum-mixed-small", 3, {}),
    ("pendulum-mixed-small", 3, D3RLPY_OPTIONS)])
def test_resume_is_exact(tmp_path, recipe, episodes, options):
    record_mixed(recipe, str(tmp_path / "data"), num_episodes=episodes)
    env = {"cartpole": "CartPole-v1", "pendulum": "Pendulum-v1"}[recipe.split("-")[0]]
    config = (CQLConfig().environment(env).offline_data(input_=str(tmp_path / "data"))
              .training(num_updates_per_iteration=4, train_batch_size_per_learner=64,
                        bc_iters=6, num_actions=2, target_network_update_freq=3, **options)
              .rl_module(model_config={"fcnet_hiddens": [16]})
              .learners(num_devices=2 if env == "CartPole-v1" else 1)
              .evaluation(evaluation_interval=0))
    assert_resume_is_exact(config, tmp_path)


def continuing_batch(seed=0):
    """Rows that do not end: the TD target bootstraps from s'."""
    rng = np.random.default_rng(seed)
    return {"obs": rng.uniform(-1, 1, (N, 2)).astype(np.float32),
            "new_obs": rng.uniform(-1, 1, (N, 2)).astype(np.float32),
            "actions": rng.uniform(-2, 2, (N, 1)).astype(np.float32),
            "rewards": rng.normal(size=N).astype(np.float32), "terminateds": np.zeros(N, bool),
            "loss_mask": np.ones(N, np.float32)}


def td_targets(cfg, batch, seed):
    """The critic loss's TD targets `[N]` at the initial parameters, per-example keys from
    `seed`, and those parameters."""
    spec = spec_of(cfg, OBS, BOX)
    params = jax.device_get(init_state(spec.learning, 0).params)
    qf = next(loss for loss in spec.learning.losses if loss.name == "qf")
    keys = jax.random.split(jax.random.PRNGKey(seed), N)
    return np.asarray(qf.fn(params, batch, keys, BatchAxis())[1]["td_target_mean"]), params


def test_mean_action_backup_bootstraps_from_the_policys_mean_action():
    """d3rlpy's CQL target, `r + gamma * min_k Q'_k(s', tanh-mean of pi(s'))`: the same for
    any key, and by hand from the target networks; the default draws `a'`, so its targets
    move with the key."""
    cfg = CQLConfig().rl_module(model_config=SMALL)
    batch = continuing_batch()
    mean_cfg = cfg.training(mean_action_backup=True)
    y0, params = td_targets(mean_cfg, batch, 0)
    y1, _ = td_targets(mean_cfg, batch, 1)
    np.testing.assert_array_equal(y0, y1)
    policy = actor(sp.to_spec(OBS), sp.to_spec(BOX), cfg.model_config)
    q = q_ensemble(sp.to_spec(OBS), sp.to_spec(BOX), cfg.model_config, cfg.twin_q)
    mean_a = policy.dist.greedy(policy.apply(params["policy"], batch["new_obs"]))
    by_hand = batch["rewards"] + cfg.gamma * np.min(
        np.asarray(q.apply(params["target_q"], batch["new_obs"], mean_a)), axis=0)
    np.testing.assert_allclose(y0, by_hand, rtol=1e-5, atol=1e-5)
    drawn0, _ = td_targets(cfg, batch, 0)
    drawn1, _ = td_targets(cfg, batch, 1)
    assert np.abs(drawn0 - drawn1).max() > 1e-3


def test_alpha_prime_lr_steps_the_multiplier_alone():
    """With `alpha_prime_lr` the multiplier takes Adam steps of its own size (Adam's first
    step moves a parameter by about its learning rate) and the Q networks' steps are the
    same as without it (to float32 rounding: two compiled programs)."""
    cfg = CQLConfig().training(lagrangian=True, num_actions=2).rl_module(model_config=SMALL)
    batch = terminal_batch(np.zeros((N, 1), np.float32))
    start = init_state(spec_of(cfg, OBS, BOX).learning, 0).params["log_alpha_prime"]
    moved = {}
    for rate in (None, 1e-5):
        state, _ = run_updates(spec_of(cfg.training(alpha_prime_lr=rate), OBS, BOX), batch, 1)
        moved[rate] = (abs(float(state.params["log_alpha_prime"]) - float(start)),
                       state.params["q"])
    assert moved[None][0] == pytest.approx(1e-3, rel=1e-2)  # critic_lr, RLlib's Box 1e-3
    assert moved[1e-5][0] == pytest.approx(1e-5, rel=1e-2)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7),
                           moved[None][1], moved[1e-5][1])
