"""Recurrent policies (`use_lstm`) trained by every offline algorithm through `Algorithm`:

* every offline algorithm of the registry (BC, MARWIL, CQL, IQL, ...) on StatelessCartPole
  (Discrete; Pendulum for Box-only ones) and CQL on Pendulum (Box) train on
  sequence rows; the rows' `loss_mask` covers exactly the recorded timesteps, changing the
  padded values changes nothing, and acting (evaluation, `EnvRunner(env, algo.actor())`)
  carries the state: the recorded `action_dist_inputs` equal one unroll over the episode;
* 8 devices equal 1 device in float64 (MARWIL: recurrent V, bootstrap windows, global
  advantage statistics);
* a checkpoint (GRUs) restores exactly; sequences also stream from the files;
* (slow) the acceptance test: on StatelessCartPole expert data an LSTM trained by BC clearly
  beats an MLP trained on the same data.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from learner_testlib import DISCRETE, accepts, max_diff, to_float64

from rljax_offline import BCConfig, CQLConfig, IQLConfig, MARWILConfig
from rljax_offline.acting.env_runner import EnvRunner, record_expert
from rljax_offline.acting.experts import cartpole_expert
from rljax_offline.algorithms import registry
from rljax_offline.algorithms.algorithm import Algorithm
from rljax_offline.data import iter_episodes
from rljax_offline.data.writer import write_episodes
from rljax_offline.envs import StatelessCartPole
from rljax_offline.episode.builder import EpisodeBuilder
from rljax_offline.errors import RljaxError
from rljax_offline.learning.data_parallel import DataParallel, select_devices
from rljax_offline.learning.init import init_state
from rljax_offline.learning.spec import LearningSpec, Loss
from rljax_offline.learning.update import make_update

S = 8
LSTM = {"fcnet_hiddens": [16], "use_lstm": True, "lstm_cell_size": 8, "max_seq_len": S}
TOL64 = 1e-9


def record_stateless_expert(num_episodes: int, seed: int):
    """Expert episodes on StatelessCartPole: the expert sees the full state, the episodes
    record only what the policy will see (x, theta)."""
    env = StatelessCartPole()
    episodes = []
    for i in range(num_episodes):
        obs, _ = env.reset(seed=seed + i)
        b = EpisodeBuilder(observation_space=env.observation_space,
                           action_space=env.action_space)
        b.add_env_reset(obs)
        done = False
        while not done:
            action = int(cartpole_expert(env.last_full_observation[None])[0])
            obs, reward, term, trunc, _ = env.step(action)
            b.add_env_step(obs, action, float(reward), terminated=term, truncated=trunc)
            done = term or trunc
        episodes.append(b.finalize())
    env.close()
    return episodes


@pytest.fixture(scope="module")
def stateless_data(tmp_path_factory):
    """Short expert episodes (the first 60 steps of each: truncated ones, so MARWIL
    bootstraps), written as Parquet."""
    path = tmp_path_factory.mktemp("stateless")
    episodes = [ep[:60] if len(ep) > 60 else ep for ep in record_stateless_expert(3, seed=0)]
    write_episodes(episodes, str(path))
    return str(path), [len(ep) for ep in episodes]


@pytest.fixture(scope="module")
def pendulum_data(tmp_path_factory):
    """One expert episode cut to 61 steps (the last sequence padded)."""
    recorded, path = tmp_path_factory.mktemp("pendulum_full"), tmp_path_factory.mktemp("pendulum")
    record_expert("Pendulum-v1", str(recorded), num_episodes=1, num_envs=1, progress=False)
    write_episodes([ep[:61] for ep in iter_episodes(str(recorded))], str(path))
    return str(path), [61]


def recurrent_config(cls, env, data, num_devices=1, **training):
    return (cls().environment(env).offline_data(input_=data)
            .training(**{"num_updates_per_iteration": 2, "train_batch_size_per_learner": 32,
                         **training})
            .rl_module(model_config=LSTM).learners(num_devices=num_devices)
            .evaluation(evaluation_interval=1, evaluation_duration=1, evaluation_num_envs=1))


# Training settings of the cases that need more than the config's defaults, by case id.
CASE_TRAINING = {
    "cql": {"target_network_update_freq": 1},
    "cql-box": {"bc_iters": 1, "num_actions": 2},
}


def _cases():
    """Every offline algorithm of the registry that takes a recurrent model (one that refuses
    `use_lstm` says so with a named error), on StatelessCartPole where it takes Discrete
    actions, else on Pendulum; and CQL's Box actor on Pendulum too."""
    cases = []
    for name in registry.names():
        cls = registry.config_class(name)
        if cls.trains_online:
            continue  # PPO trains recurrent policies online: tests/test_ppo_recurrent.py
        try:
            config = cls().rl_module(model_config=LSTM)
        except RljaxError:
            continue
        env = "stateless" if accepts(config, DISCRETE) else "pendulum"
        cases.append((name, cls, CASE_TRAINING.get(name, {}), env))
    return [*cases, ("cql-box", CQLConfig, CASE_TRAINING["cql-box"], "pendulum")]


CASES = _cases()
ENVS = {"stateless": StatelessCartPole, "pendulum": "Pendulum-v1"}


def _host_rows(algo: Algorithm) -> dict:
    data = algo._data
    return jax.tree_util.tree_map(lambda x: np.asarray(x)[:data.num_rows],
                                  jax.device_get(data.columns))


def _update(algo: Algorithm, batch: dict):
    """The params after one update of a copy of the algorithm's state on `batch`."""
    state = algo.dp.put_replicated(jax.device_get(algo.state))
    state, _ = algo.dp.step(state, batch)
    return jax.device_get(state.params)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_recurrent_algorithm_trains_on_sequences_and_acts_with_state(
        case, stateless_data, pendulum_data):
    name, cls, training, env = case
    data, lengths = {"stateless": stateless_data, "pendulum": pendulum_data}[env]
    algo = recurrent_config(cls, ENVS[env], data, **training).build()
    result = algo.train()
    metrics = result["learners"]["default_policy"]
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    assert "episode_return_mean" in result["evaluation"]["env_runners"]

    # Rows are sequences: max_seq_len steps, the mask exactly the recorded steps.
    rows = _host_rows(algo)
    mask, seq_lens = rows["loss_mask"].astype(bool), rows["seq_lens"]
    assert mask.shape == (sum(-(-n // S) for n in lengths), S)
    np.testing.assert_array_equal(mask, np.arange(S)[None, :] < seq_lens[:, None])
    assert mask.sum() == sum(lengths)
    assert algo.rows_per_update == 4  # 32 timesteps in sequences of 8

    # Padding never leaks: garbage in every padded step of every timestep column.
    short, full = np.flatnonzero(seq_lens < S), np.flatnonzero(seq_lens == S)
    idx = np.concatenate([short[:2], full])[:4]
    batch = jax.tree_util.tree_map(lambda x: x[idx], rows)
    pad = ~batch["loss_mask"].astype(bool)
    assert len(idx) == 4 and pad.any()
    rng = np.random.default_rng(0)
    if "bootstrap_seq_lens" in batch:  # MARWIL's per-sequence window has its own length
        window_pad = np.arange(S)[None, :] >= batch["bootstrap_seq_lens"][:, None]
    noisy = dict(batch)
    for k, v in batch.items():
        if k in ("loss_mask", "seq_lens", "state_in") or np.ndim(v) < 2 or v.shape[1] != S:
            continue
        m = window_pad if k == "bootstrap_obs" else pad
        m = m.reshape(*m.shape, *[1] * (v.ndim - 2))
        garbage = (rng.integers(0, 2, v.shape) if v.dtype.kind in "iub"
                   else 3 * rng.standard_normal(v.shape)).astype(v.dtype)
        noisy[k] = np.where(m, garbage, v)
    assert max_diff(_update(algo, batch), _update(algo, noisy)) == 0.0

    # Acting carries the state: the recorded outputs are one unroll over the episode.
    runner = EnvRunner(ENVS[env], algo.actor(), num_envs=1, seed=3)
    (episode,) = runner.episodes(num_episodes=1)
    runner.close()
    T = min(len(episode), 40)
    policy, net = algo.spec.acting.policy, algo.spec.acting.policy_network
    obs = jnp.asarray(episode.get_observations()[None, :T])
    out, _ = policy.forward(jax.device_get(algo.state.params)[net],
                            {"obs": obs, "state_in": jax.tree_util.tree_map(
                                lambda x: x[None], policy.initial_state()),
                             "seq_lens": jnp.array([T])})
    recorded = episode.get_extra_model_outputs("action_dist_inputs")[:T]
    np.testing.assert_allclose(recorded, np.asarray(out[0]), rtol=1e-4, atol=1e-5)
    state_out = episode.get_extra_model_outputs("state_out")
    assert set(state_out) == {"h", "c"} and len(state_out["h"]) == len(episode)
    algo.stop()


def test_eight_devices_equal_one_in_float64(stateless_data):
    """MARWIL (recurrent policy and V, per-sequence bootstrap windows, the advantage norm
    over the global batch): shard_map over 8 devices == plain jit on 1, in float64."""
    data, _ = stateless_data
    algo = recurrent_config(MARWILConfig, StatelessCartPole, data).build()
    algo.load_data()
    rows = _host_rows(algo)
    rng = np.random.default_rng(1)
    batches = [jax.tree_util.tree_map(lambda x, idx=idx: x[idx], rows)
               for idx in rng.integers(0, len(rows["seq_lens"]), (3, 8))]
    with jax.enable_x64(True):
        results = []
        for n, mode in ((1, "jit"), (8, "shard_map")):
            dp = DataParallel(algo.spec.learning, select_devices(n), 8, mode=mode)
            state = dp.put_replicated(to_float64(init_state(algo.spec.learning, 0)))
            for b in batches:
                state, metrics = dp.step(state, to_float64(b))
            results.append(jax.device_get((state.params, state.extra, metrics)))
    diff = max_diff(results[0], results[1])
    print(f"recurrent MARWIL shard_map x8 vs jit x1: max |difference| = {diff:.3g}")
    assert diff < TOL64


def test_recurrent_checkpoint_restores_exactly(stateless_data, tmp_path):
    """IQL with GRUs (actor, twin Q, V): save, restore, and training goes on bit for bit."""
    data, _ = stateless_data
    config = recurrent_config(IQLConfig, StatelessCartPole, data).evaluation(
        evaluation_interval=0).rl_module(model_config={"use_lstm": False, "use_gru": True})
    algo = config.build()
    algo.train()
    algo.save(str(tmp_path / "ckpt"))
    restored = Algorithm.from_checkpoint(str(tmp_path / "ckpt"), config)
    assert max_diff(jax.device_get(algo.state.params),
                    jax.device_get(restored.state.params)) == 0.0
    a, b = algo.train(), restored.train()
    assert a["learners"]["default_policy"] == b["learners"]["default_policy"]
    assert max_diff(jax.device_get(algo.state), jax.device_get(restored.state)) == 0.0


def test_streamed_sequences_train(stateless_data):
    """Both materialize flags False: sequence rows stream from the files, each update exactly
    `rows_per_update` sequences."""
    data, _ = stateless_data
    algo = recurrent_config(BCConfig, StatelessCartPole, data).offline_data(
        materialize_data=False, materialize_mapped_data=False,
        shuffle_buffer_size=4).evaluation(evaluation_interval=0).build()
    first = algo.train()["learners"]["default_policy"]["policy_loss"]
    assert math.isfinite(first) and algo.state.step == 2
    algo.stop()


def test_prev_action_and_reward_enter_both_pipelines(stateless_data):
    """`lstm_use_prev_action` / `lstm_use_prev_reward`: the policy sees (x, theta), the
    previous action one-hot and the previous reward, in training and in acting."""
    data, _ = stateless_data
    algo = recurrent_config(BCConfig, StatelessCartPole, data).rl_module(model_config={
        "lstm_use_prev_action": True, "lstm_use_prev_reward": True}).build()
    assert algo.spec.acting.policy.obs_spec.shape == (2 + 2 + 1,)
    result = algo.train()
    assert math.isfinite(result["learners"]["default_policy"]["policy_loss"])
    assert result["evaluation"]["env_runners"]["num_episodes"] == 1
    algo.stop()


def test_losses_must_give_one_value_per_timestep():
    """The core's named error when a loss's per-example values do not match the mask."""
    def loss(params, batch, rng, axis):
        return jnp.sum(params["w"] * batch["obs"], axis=(1, 2)), {}  # [B], not [B, T]

    learning = LearningSpec(init=lambda rng: {"w": jnp.ones(2)},
                            losses=(Loss("default_optimizer", ("w",), loss, optax.sgd(0.1)),))
    batch = {"obs": jnp.ones((3, 4, 2)), "loss_mask": jnp.ones((3, 4), bool)}
    with pytest.raises(ValueError, match="one value per timestep"):
        make_update(learning, axis_name=None)(init_state(learning), batch)


@pytest.mark.slow
def test_lstm_beats_mlp_on_stateless_cartpole_with_bc(tmp_path):
    """The velocities are masked: an MLP trained by BC on the expert's data cannot tell which
    way the pole moves; an LSTM can, and balances far longer."""
    write_episodes(record_stateless_expert(10, seed=0), str(tmp_path))

    def bc_return(model_config, batch_size):
        algo = (BCConfig().environment(StatelessCartPole).offline_data(input_=str(tmp_path))
                .training(lr=3e-3, num_updates_per_iteration=1000,
                          train_batch_size_per_learner=batch_size)
                .rl_module(model_config=model_config).learners(num_devices=1)
                .evaluation(evaluation_interval=0, evaluation_duration=4,
                            evaluation_num_envs=4)).build()
        algo.train()
        ret = algo.evaluate()["episode_return_mean"]
        algo.stop()
        return ret

    lstm = bc_return({"fcnet_hiddens": [32], "use_lstm": True, "lstm_cell_size": 32,
                      "max_seq_len": 16}, 1024)
    mlp = bc_return({"fcnet_hiddens": [32, 32]}, 1024)
    print(f"StatelessCartPole BC mean return through Algorithm: LSTM {lstm:.1f}, MLP {mlp:.1f}")
    assert lstm > 100 and lstm > 3 * mlp, (lstm, mlp)
