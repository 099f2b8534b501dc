"""SAC: its loss pieces (n-step targets, the soft TD target, the temperature loss, the entropy
target), the on-device replay buffer (wrap-around, sampling only filled rows, under jit and
not), the updates on a replicated buffer over 8 devices against 1, the online loop on
Pendulum (output episodes, checkpoints, acting, export), discrete SAC's exact expectations,
offline-to-online starts and their refusals, and (slow) SAC learning Pendulum.
(Modes agree, 8 devices == 1 for one update, masked rows: `learner_testlib.ALGORITHM_CASES`.)"""

import collections

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from learner_testlib import max_diff, random_columns, spec_for, to_float64

from rljax_offline import Algorithm, ConfigError, CQLConfig, IQLConfig, SACConfig
from rljax_offline import spaces as sp
from rljax_offline.acting.recording import PolicyMismatchError
from rljax_offline.algorithms.sac.config import n_step_returns
from rljax_offline.algorithms.td3_bc import TD3BCConfig
from rljax_offline.connectors import Context, Spaces, default_learner, pipeline
from rljax_offline.data import read_episodes
from rljax_offline.data.replay import make_replay_buffer
from rljax_offline.episode.batch import EpisodeBatch
from rljax_offline.episode.episode import Episode
from rljax_offline.export import load_stablehlo
from rljax_offline.learning.data_parallel import DataParallel, select_devices
from rljax_offline.learning.init import init_state
from rljax_offline.learning.losses import soft_td_target, target_entropy, temperature_loss
from rljax_offline.models.actor_and_q import actor, q_ensemble

SMALL = {"fcnet_hiddens": [16, 16]}
BOX = (gym.spaces.Box(-5, 5, (3,), np.float32), gym.spaces.Box(-2, 2, (2,), np.float32))


# ---------------------------------------------------------------------- config


def test_config_has_rllibs_names_and_defaults():
    c = SACConfig()
    assert (c.twin_q, c.tau, c.initial_alpha, c.target_entropy, c.n_step) == (
        True, 5e-3, 1.0, "auto", 1)
    assert (c.gamma, c.train_batch_size_per_learner, c.lr) == (0.99, 256, None)
    assert c.num_steps_sampled_before_learning_starts == 1500
    assert c.replay_buffer_config == {"capacity": 1_000_000}
    assert (c.actor_lr, c.critic_lr, c.alpha_lr) == (3e-5, 3e-4, 3e-4)
    assert c.target_network_update_freq == 0 and c.training_intensity is None
    assert c.trains_online and c.updates_per_iteration == c.min_sample_timesteps_per_iteration
    assert c.training(training_intensity=512.0).updates_per_iteration == 200


@pytest.mark.parametrize("bad, match", [
    ({"lr": 1e-3}, "lr is not used"),
    ({"replay_buffer_config": {"capacity": 0}}, "replay_buffer_config must be"),
    ({"target_entropy": "high"}, "target_entropy must be"),
    ({"n_step": 0}, "n_step must be"),
])
def test_bad_options_are_one_line_config_errors(bad, match):
    with pytest.raises(ConfigError, match=match) as e:
        SACConfig().training(**bad)
    assert "\n" not in str(e.value)


def test_unbounded_actions_and_recurrent_models_are_named_errors():
    unbounded = sp.to_spec(gym.spaces.Box(-np.inf, np.inf, (2,), np.float32))
    with pytest.raises(ConfigError, match="needs a Box action space with finite bounds"):
        SACConfig().check_spaces(sp.to_spec(BOX[0]), unbounded)
    with pytest.raises(ConfigError, match="no recurrent form"):
        SACConfig().rl_module(model_config={"use_lstm": True})


def test_target_entropy_auto_is_minus_the_action_dimension_or_near_log_n():
    assert target_entropy("auto", sp.to_spec(BOX[1])) == -2.0
    assert target_entropy("auto", sp.to_spec(gym.spaces.Box(-1, 1, (3, 2)))) == -6.0
    assert target_entropy(-0.5, sp.to_spec(BOX[1])) == -0.5
    assert target_entropy("auto", sp.to_spec(gym.spaces.Discrete(4))) == pytest.approx(
        0.98 * np.log(4))


def test_discrete_losses_take_exact_expectations_over_the_actions():
    """Discrete SAC: the critic's target is `r + gamma * sum_a pi(a|s') (min Q'(s', a) -
    alpha log pi(a|s'))`, the actor's loss `sum_a pi(a|s) (alpha log pi(a|s) - min Q(s, a))`,
    both exact sums (checked against networks built apart with the same config)."""
    spaces = (gym.spaces.Box(-5, 5, (4,), np.float32), gym.spaces.Discrete(3))
    config = SACConfig().training(initial_alpha=0.3).rl_module(model_config=SMALL)
    spec = spec_for(config, spaces)
    params = dict(init_state(spec.learning, 0).params)
    params["target_q"] = jax.tree_util.tree_map(lambda x: 0.9 * x, params["q"])
    batch = {k: jnp.asarray(v) for k, v in random_columns(
        spec.data.columns, *spaces, 8, seed=4).items()}
    keys = jax.random.split(jax.random.PRNGKey(0), 8)
    obs_spec, act_spec = map(sp.to_spec, spaces)
    policy = actor(obs_spec, act_spec, config.model_config)
    q = q_ensemble(obs_spec, act_spec, config.model_config, True)

    def expected(obs, q_params):
        logpi = jax.nn.log_softmax(policy.apply(params["policy"], obs))
        qmin = jnp.min(q.apply(q_params, obs), axis=0)
        return jnp.sum(jnp.exp(logpi) * (qmin - 0.3 * logpi), -1), logpi, qmin

    soft_next, _, _ = expected(batch["new_obs"], params["target_q"])
    y = batch["rewards"] + 0.99 ** batch["n_step"] * (1 - batch["terminateds"]) * soft_next
    _, metrics = spec.learning.losses[0].fn(params, batch, keys, None)
    np.testing.assert_allclose(metrics["td_target_mean"], y, rtol=1e-5, atol=1e-5)
    _, logpi, qmin = expected(batch["obs"], params["q"])
    want = jnp.sum(jnp.exp(logpi) * (0.3 * logpi - qmin), -1)
    loss, _ = spec.learning.losses[1].fn(params, batch, keys, None)
    np.testing.assert_allclose(loss, want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------- loss pieces


def _episode(n, terminated, seed, t_started=0):
    rng = np.random.default_rng(seed)
    return Episode(observations=rng.normal(size=(n + 1, 3)).astype(np.float32),
                   actions=rng.uniform(-2, 2, (n, 2)).astype(np.float32),
                   rewards=rng.normal(size=n).astype(np.float32), terminated=terminated,
                   truncated=False, t_started=t_started,
                   observation_space=BOX[0], action_space=BOX[1])


def _n_step_reference(ep, n, gamma):
    """Per step: (discounted sum of the next k rewards, obs after them, terminated, k)."""
    rows = []
    T = len(ep)
    for t in range(T):
        k = min(n, T - t)
        ret = sum(gamma ** i * float(ep.rewards[t + i]) for i in range(k))
        rows.append((ret, np.asarray(ep.observations[t + k]),
                     bool(ep.terminated and t + k == T), k))
    return rows


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("n", [1, 3])
def test_n_step_returns_match_a_per_step_reference(n, jit):
    gamma = 0.9
    # a terminated episode, a cut chunk (not done: bootstraps from fewer steps at its end)
    episodes = [_episode(7, True, 0), _episode(4, False, 1, t_started=5)]
    spaces = Spaces.of(*BOX)
    pipe = pipeline(default_learner(spaces), n_step_returns(n, gamma))
    apply = jax.jit(pipe.apply) if jit else pipe.apply
    _, batch, _ = apply(pipe.init(spaces), EpisodeBatch.from_episodes(episodes), {}, Context())
    mask = np.asarray(batch["loss_mask"], bool)
    got = {k: np.asarray(batch[k])[mask] for k in ("rewards", "new_obs", "terminateds", "n_step")}
    want = [row for ep in episodes for row in _n_step_reference(ep, n, gamma)]
    np.testing.assert_allclose(got["rewards"], [r[0] for r in want], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(got["new_obs"], np.stack([r[1] for r in want]))
    np.testing.assert_array_equal(got["terminateds"], [r[2] for r in want])
    np.testing.assert_array_equal(got["n_step"], [r[3] for r in want])


def test_soft_td_target_discounts_by_n_step_and_stops_at_terminals():
    batch = {"rewards": jnp.array([1.0, 2.0, 3.0]), "terminateds": jnp.array([False, True, False]),
             "n_step": jnp.array([1, 1, 3], jnp.int32)}
    next_q, next_logp = jnp.array([10.0, 10.0, 10.0]), jnp.array([-1.0, -1.0, -2.0])
    y = soft_td_target(batch, next_q, next_logp, jnp.float32(0.5), 0.9)
    np.testing.assert_allclose(y, [1 + 0.9 * 10.5, 2.0, 3 + 0.9 ** 3 * 11.0], rtol=1e-6)


def test_temperature_loss_raises_alpha_below_the_entropy_target():
    """-logp is the entropy estimate: below the target (-2) alpha must grow (its gradient
    w.r.t. log_alpha is negative), above it shrink."""
    grad = jax.grad(lambda la, lp: jnp.mean(temperature_loss(la, lp, -2.0)))
    assert grad(0.0, jnp.array([3.0, 2.5])) < 0  # entropy -3 < -2: more exploration
    assert grad(0.0, jnp.array([1.0, 0.0])) > 0


# ---------------------------------------------------------------------- replay buffer


def _rows(ids, width=2):
    ids = np.asarray(ids, np.int32)
    return {"id": ids, "obs": np.repeat(ids[:, None], width, 1).astype(np.float32) + 0.5}


# A few capacities, their buffers (and jitted functions) made once: one compile each.
_BUFFERS = {c: make_replay_buffer(capacity=c, batch_size=64) for c in (1, 3, 8)}
_JITTED = {c: (jax.jit(b.add), jax.jit(b.sample)) for c, b in _BUFFERS.items()}


@pytest.mark.parametrize("jit", [False, True])
@settings(max_examples=25, deadline=None)
@given(capacity=st.sampled_from(sorted(_BUFFERS)),
       adds=st.lists(st.integers(0, 12), min_size=1, max_size=6))
def test_buffer_wraps_around_and_samples_only_filled_rows(jit, capacity, adds):
    buffer = _BUFFERS[capacity]
    add, sample = _JITTED[capacity] if jit else (buffer.add, buffer.sample)
    width = 12  # one padded shape for every add; `count` says how many rows are real
    state = buffer.init(_rows(np.zeros(width)))
    model = collections.deque(maxlen=capacity)  # what the ring must hold
    next_id = 1
    for i, count in enumerate(adds):
        ids = np.arange(next_id, next_id + width)
        next_id += count
        state = add(state, _rows(ids), np.int32(count))
        model.extend(ids[:count].tolist())
        assert int(state.size) == len(model)
        assert int(state.position) == (next_id - 1) % capacity
        held = np.asarray(state.columns["id"])
        assert sorted(held[held > 0].tolist()) == sorted(model)
        if len(model):
            batch = sample(state, jax.random.PRNGKey(i))
            drawn = np.asarray(batch["id"])
            assert set(drawn.tolist()) <= set(model)  # never an unfilled (zero) slot
            np.testing.assert_array_equal(batch["obs"][:, 0], drawn + 0.5)
    assert bool(buffer.can_sample(state)) == bool(model)


def test_buffer_samples_every_filled_row_uniformly():
    buffer = make_replay_buffer(capacity=8, batch_size=4000)
    state = buffer.add(buffer.init(_rows(np.zeros(8))), _rows(np.arange(1, 9)), 5)
    counts = np.bincount(np.asarray(buffer.sample(state, jax.random.PRNGKey(0))["id"]),
                         minlength=9)
    assert counts[0] == 0 and counts[6:].sum() == 0
    assert counts[1:6].min() > 4000 / 5 * 0.8  # ~800 each


def test_buffer_factory_checks_its_arguments_eagerly():
    with pytest.raises(ValueError, match="capacity must be a positive int"):
        make_replay_buffer(capacity=0, batch_size=4)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        make_replay_buffer(capacity=4, batch_size=2.0)


def test_updates_on_a_replicated_buffer_over_eight_devices_equal_one_in_float64():
    config = SACConfig().training(n_step=2).rl_module(model_config=SMALL)
    spec = spec_for(config, BOX)
    cols = random_columns(spec.data.columns, *BOX, 100, seed=2)
    out = {}
    with jax.enable_x64(True):
        for n in (1, 8):
            dp = DataParallel(spec.learning, select_devices(n), 32)
            buffer = make_replay_buffer(capacity=128, batch_size=32)
            rows = to_float64(cols)
            state = dp.put_replicated(buffer.add(buffer.init(rows), rows))
            train = dp.put_replicated(to_float64(init_state(spec.learning, 1)))
            train, _ = dp.scan_on_buffer(4, buffer.sample)(train, state)
            out[n] = jax.device_get(train)
    diff = max_diff(out[1].params, out[8].params)
    print(f"SAC on a replicated buffer, 8 devices vs 1 after 4 updates: {diff:.3g}")
    assert diff < 1e-9 and int(out[8].step) == 4


# ---------------------------------------------------------------------- the online loop


def _pendulum(**training):
    return (SACConfig().environment("Pendulum-v1").rl_module(model_config=SMALL)
            .training(**{"num_steps_sampled_before_learning_starts": 100,
                         "train_batch_size_per_learner": 32, **training})
            .reporting(min_sample_timesteps_per_iteration=100).learners(num_devices=1))


def test_online_loop_writes_episodes_checkpoints_and_acts(tmp_path):
    out = tmp_path / "sampled"
    algo = _pendulum(n_step=3).offline_data(output=str(out)).build()
    before = jax.device_get(algo.state.params)
    for _ in range(5):  # 500 steps: two whole 200-step episodes, one running
        result = algo.train()
    assert result["num_env_steps_sampled_lifetime"] == 500
    assert result["learners"]["default_policy"]["num_module_steps_trained"] == 100 * 32
    assert result["env_runners"]["episode_len_mean"] == 200
    assert max_diff(before["policy"], jax.device_get(algo.state.params["policy"])) > 0
    ckpt = algo.save(str(tmp_path / "ckpt"))
    episodes = read_episodes(str(out))  # save() finished the file written so far
    assert [len(ep) for ep in episodes] == [200, 200]
    assert all(ep.truncated and not ep.terminated for ep in episodes)
    logp = np.concatenate([ep.extra_model_outputs["action_logp"] for ep in episodes])
    inputs = np.concatenate([ep.extra_model_outputs["action_dist_inputs"] for ep in episodes])
    actions = np.concatenate([ep.actions for ep in episodes])
    assert inputs.shape == (400, 2) and np.all(np.abs(actions) <= 2.0)
    again = algo.spec.acting.dist.logp(jnp.asarray(inputs), jnp.asarray(actions))
    np.testing.assert_allclose(again, logp, rtol=1e-3, atol=1e-3)
    algo.stop()
    restored = Algorithm.from_checkpoint(ckpt)
    assert type(restored).__name__ == "SAC" and restored.env_steps_sampled == 500
    assert max_diff(jax.device_get(algo.state.params), jax.device_get(restored.state.params)) == 0
    assert restored.actor(explore=True).explore
    sampled = restored.compute_actions(np.zeros((64, 3), np.float32), explore=True)
    assert sampled.shape == (64, 1) and np.std(sampled) > 0  # explore: sampled, not greedy
    obs = np.random.default_rng(0).uniform(-1, 1, (16, 3)).astype(np.float32)
    exported, _ = load_stablehlo(restored.export_policy(str(tmp_path / "sac.stablehlo")))(obs)
    np.testing.assert_allclose(exported, restored.compute_actions(obs), atol=1e-5)
    assert restored.train()["num_env_steps_sampled_lifetime"] == 600
    restored.stop()


@pytest.mark.parametrize("store", [False, True])
def test_store_buffer_in_checkpoints_restores_the_replay_buffer(store, tmp_path):
    algo = _pendulum(num_steps_sampled_before_learning_starts=200,
                     store_buffer_in_checkpoints=store).build()
    for _ in range(3):
        algo.train()
    ckpt = algo.save(str(tmp_path / "ckpt"))
    restored = Algorithm.from_checkpoint(ckpt)
    assert restored.source.rows_added == (300 if store else 0)
    if store:
        assert max_diff(jax.device_get(algo.source.buffer_state.columns),
                        jax.device_get(restored.source.buffer_state.columns)) == 0
        assert int(restored.source.buffer_state.size) == 300
    trained = restored.train()["learners"]["default_policy"]["num_module_steps_trained"]
    assert trained == (100 * 32 if store else 0)  # without it: refilling (100 < 200 rows)
    algo.stop()
    restored.stop()


# ---------------------------------------------------------------------- offline to online


@pytest.fixture(scope="module")
def offline_checkpoints(tmp_path_factory):
    """Untrained (built and saved) CQL, IQL and TD3+BC checkpoints on Pendulum, with another
    seed (and CQL another temperature) than SAC's, so a start from them shows."""
    root = tmp_path_factory.mktemp("offline")
    paths = {}
    for name, config in (("cql", CQLConfig().training(initial_alpha=0.5)), ("iql", IQLConfig()),
                         ("iql_plain", IQLConfig().training(actor_squashed=False)),
                         ("td3_bc", TD3BCConfig().training(normalize_observations=False)),
                         ("cql_single_q", CQLConfig().training(twin_q=False))):
        algo = (config.environment("Pendulum-v1").rl_module(model_config=SMALL)
                .debugging(seed=7).build())
        paths[name] = algo.save(str(root / name))
        algo.stop()
    return paths


def test_sac_starts_from_a_cql_checkpoint(offline_checkpoints):
    path = offline_checkpoints["cql"]
    cql = Algorithm.from_checkpoint(path)
    want = jax.device_get(cql.state.params)
    cql.stop()
    sac = _pendulum().training(init_from=path).build()
    got = jax.device_get(sac.state.params)
    own = _pendulum().build()
    fresh = jax.device_get(own.state.params)
    own.stop()
    for net in ("policy", "q", "target_q", "log_alpha"):
        assert max_diff(want[net], got[net]) == 0, net
        assert max_diff(fresh[net], got[net]) > 0, net  # not SAC's own init
    assert sac.started_from == path and sac.config.init_from is None
    assert sac.train()["started_from"] == path
    sac.stop()


def test_sac_starts_from_a_squashed_iql_checkpoint(offline_checkpoints):
    sac = _pendulum().training(init_from=offline_checkpoints["iql"]).build()
    sac.stop()


@pytest.mark.parametrize("name, match", [
    ("iql_plain", "its policy is a plain Gaussian, SAC's is a tanh-squashed Gaussian"),
    ("td3_bc", "its policy is a deterministic"),
    ("cql_single_q", "has 1 Q network"),
])
def test_what_cannot_start_sac_is_a_one_line_policy_mismatch(offline_checkpoints, name, match):
    with pytest.raises(PolicyMismatchError, match=match) as e:
        _pendulum().training(init_from=offline_checkpoints[name]).build()
    assert "\n" not in str(e.value) and offline_checkpoints[name] in str(e.value)


def test_sac_takes_the_checkpoints_model_config_and_checks_shapes(offline_checkpoints):
    path = offline_checkpoints["cql"]
    sac = _pendulum().rl_module(model_config={"fcnet_hiddens": [8]}).training(
        init_from=path).build()
    assert sac.config.model_config["fcnet_hiddens"] == SMALL["fcnet_hiddens"]
    sac.stop()
    other = _pendulum().rl_module(model_config={"fcnet_hiddens": [8]}).build()
    with pytest.raises(PolicyMismatchError, match="policy network has other shapes"):
        other.start_from(path)  # what build() avoids by taking the checkpoint's model_config
    other.stop()


@pytest.mark.slow
def test_sac_learns_pendulum():
    """RLlib's defaults but the actor's learning rate (the critic's, 3e-4) and learning from
    1000 steps: a random policy scores about -1200, the scripted expert about -150; after
    6000 env steps (~50 s on 2 cores) SAC's greedy policy is well past halfway."""
    algo = (SACConfig().environment("Pendulum-v1")
            .training(num_steps_sampled_before_learning_starts=1000, actor_lr=3e-4)
            .evaluation(evaluation_duration=10, evaluation_num_envs=10)
            .learners(num_devices=1)).build()
    while algo.env_steps_sampled < 6000:
        algo.train()
    level = algo.evaluate()["episode_return_mean"]
    algo.stop()
    print(f"SAC on Pendulum after 6000 env steps: greedy return {level:.1f}")
    assert level > -400, level
