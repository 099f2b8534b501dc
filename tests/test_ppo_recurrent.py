"""PPO with recurrent policies (`use_lstm` / `use_gru`), RLlib's semantics:

* GAE over sequences: `V` unrolled per `max_seq_len` sequence from the critic state the
  sampler recorded equals one step-by-step unroll over the whole episode (terminated,
  truncated, cut and continued chunks), bootstrap values included (float64);
* padded steps and all-padding sequences, whatever garbage they hold, leave an update and
  the whole epoch program exactly unchanged; 2 devices equal 1 (float64);
* rollouts of different episode lengths share one compiled epoch program; the sampler
  records the actor's and the critic's state and continued chunks carry one lookback step;
* a GRU run's checkpoint restores and goes on exactly as the original; PPO fine-tunes a
  recurrent BC clone (its policy weights exactly);
* (slow) on StatelessCartPole PPO+LSTM clearly beats PPO+MLP on the same budget.
"""

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from learner_testlib import max_diff, to_float64

from rljax_offline import Algorithm, BCConfig, ConfigError, PPOConfig
from rljax_offline import spaces as sp
from rljax_offline.acting.env_runner import record_expert
from rljax_offline.algorithms.ppo.config import ACTOR, CRITIC, sequence_advantage_estimation
from rljax_offline.connectors import Context, Spaces, default_learner, pipeline
from rljax_offline.envs import StatelessCartPole
from rljax_offline.episode.batch import EpisodeBatch
from rljax_offline.episode.episode import Episode
from rljax_offline.learning.data_parallel import DataParallel, select_devices
from rljax_offline.learning.init import init_state
from rljax_offline.learning.update import make_update
from rljax_offline.models.actor_critic import critic

S = 4
LSTM = {"fcnet_hiddens": [8], "use_lstm": True, "lstm_cell_size": 6, "max_seq_len": S}
OBS = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
ACT = gym.spaces.Discrete(2)
SPACES = Spaces.of(OBS, ACT)
# float64 end to end, a few dozen multiply-adds per value: differences are summation-order
# rounding, ~1e-15 relative.
TOL64 = 1e-9


def _spec(model=LSTM):
    """PPO's spec and its value network (PPO's model config: tanh, as RLlib's)."""
    config = PPOConfig().rl_module(model_config=model)
    spec = config.make_spec(sp.to_spec(OBS), sp.to_spec(ACT))
    return spec, critic(sp.to_spec(OBS), config.model_config)


def _step_by_step(module, value, params, obs):
    """Acting's view of one episode: one step at a time from the initial state. Returns the
    `state_out` after each step and `V` at every observation (the last one included)."""

    @jax.jit
    def one_step(state, o):
        step = {"obs": o[None, None], "seq_lens": jnp.ones(1, jnp.int32)}
        features, _ = value.forward(params, {**step, "state_in": state[CRITIC]})
        _, state = module.forward(params, {**step, "state_in": state})
        return state, value.head(params, features[:, 0])[0]

    state = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float64)[None],
                                   module.initial_state())
    states, values = [], []
    for o in obs:
        state, v = one_step(state, jnp.asarray(o))
        values.append(float(v))
        states.append(jax.tree_util.tree_map(lambda x: np.asarray(x[0]), state))
    stacked = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *states)
    return stacked, np.asarray(values)


def _gae(rewards, values, terminated, gamma, lam):
    """Reference GAE of one chunk: `values` has one more entry (the bootstrap)."""
    v_next = values[1:].copy()
    if terminated:
        v_next[-1] = 0.0
    adv, running = np.zeros(len(rewards)), 0.0
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * v_next[t] - values[t] + gamma * lam * running
        adv[t] = running
    return adv


def _chunk(obs, rewards, states, a: int, b: int, terminated: bool, truncated: bool):
    """Steps `a..b` of an episode as the sampler records them: a continued chunk (a > 0)
    with the step before it as lookback."""
    lookback = 1 if a else 0
    steps = slice(a - lookback, b)
    return Episode(observations=list(obs[a - lookback:b + 1]), actions=[0] * (b - a + lookback),
                   rewards=list(rewards[steps]),
                   extra_model_outputs={
                       "state_out": jax.tree_util.tree_map(lambda x: x[steps], states),
                       "action_logp": np.zeros(b - a + lookback)},
                   terminated=terminated, truncated=truncated, t_started=a,
                   len_lookback_buffer=lookback, observation_space=OBS, action_space=ACT)


def test_sequence_values_and_gae_equal_one_unroll_over_the_whole_episode():
    gamma, lam = 0.9, 0.8
    rng = np.random.default_rng(0)
    with jax.enable_x64(True):
        spec, value = _spec()
        module = spec.acting.policy
        params = to_float64(jax.device_get(jax.jit(spec.learning.init)(jax.random.PRNGKey(1))))
        chunks, refs = [], []
        # (steps, terminated, truncated, the step where the sampler cut the episode)
        for n, term, trunc, cut in ((7, True, False, None), (9, False, True, None),
                                    (13, False, False, 6)):
            obs = rng.normal(size=(n + 1, 2)).astype(np.float32)
            rewards = rng.normal(size=n).astype(np.float32)
            states, values = _step_by_step(module, value, params, obs)
            for a, b in [(0, n)] if cut is None else [(0, cut), (cut, n)]:
                ends = b == n and cut is None  # the continued chunk is cut again
                flags = (ends and term, ends and trunc)
                chunks.append(_chunk(obs, rewards, states, a, b, *flags))
                refs.append((values[a:b], _gae(rewards[a:b], values[a:b + 1], flags[0],
                                               gamma, lam)))
        assert [c.t_started for c in chunks] == [0, 0, 0, 6]
        pipe = pipeline(default_learner(SPACES, max_seq_len=S,
                                        initial_state=module.initial_state()),
                        sequence_advantage_estimation(gamma, lam, value, S))
        eb = EpisodeBatch.from_episodes(chunks)
        _, batch, _ = jax.jit(pipe.apply)(pipe.init(SPACES), eb, {}, Context(params=params))
        B = len(chunks)
        K = -(-eb.max_len // S)
        assert batch["vf_preds"].shape == (B * K, S)
        timeline = {k: np.asarray(batch[k]).reshape(B, K * S)
                    for k in ("vf_preds", "advantages", "value_targets", "loss_mask")}
        for b, (ref_v, ref_adv) in enumerate(refs):
            n = len(ref_v)  # the chunk's steps
            assert timeline["loss_mask"][b, :n].all() and not timeline["loss_mask"][b, n:].any()
            np.testing.assert_allclose(timeline["vf_preds"][b, :n], ref_v, rtol=0, atol=TOL64)
            np.testing.assert_allclose(timeline["advantages"][b, :n], ref_adv, rtol=0,
                                       atol=TOL64)
            np.testing.assert_allclose(timeline["value_targets"][b, :n], ref_adv + ref_v,
                                       rtol=0, atol=TOL64)
            assert not timeline["advantages"][b, n:].any()


def _sequence_batch(rng, seq_lens, garbage: bool):
    """A PPO train batch of `len(seq_lens)` sequences; padded steps hold zeros, or random
    garbage with `garbage`."""
    n = len(seq_lens)
    mask = np.arange(S)[None, :] < np.asarray(seq_lens)[:, None]
    cols = {"obs": rng.normal(size=(n, S, 2)), "actions": rng.integers(0, 2, (n, S)),
            "action_logp": np.log(rng.uniform(0.2, 0.8, (n, S))),
            "advantages": rng.normal(size=(n, S)), "value_targets": rng.normal(size=(n, S)),
            "vf_preds": rng.normal(size=(n, S))}
    noise = np.random.default_rng(99)  # the same valid steps, whatever the padding holds
    out = {}
    for k, v in cols.items():
        fill = (noise.integers(0, 2, v.shape) if v.dtype.kind == "i"
                else noise.normal(size=v.shape) * 50) if garbage else np.zeros_like(v)
        out[k] = np.where(mask.reshape(*mask.shape, *[1] * (v.ndim - 2)), v, fill)
    state = {"h": rng.normal(size=(n, 6)), "c": rng.normal(size=(n, 6))}
    out["state_in"] = {ACTOR: state, CRITIC: jax.tree_util.tree_map(lambda x: -x, state)}
    out["seq_lens"] = np.asarray(seq_lens, np.int32)
    out["loss_mask"] = mask
    return out


def test_padded_steps_and_padding_sequences_leave_updates_exactly_unchanged():
    with jax.enable_x64(True):
        learning = _spec()[0].learning
        state = to_float64(jax.device_get(init_state(learning, 3)))
        clean = _sequence_batch(np.random.default_rng(0), [4, 2, 1, 3], garbage=False)
        dirty = _sequence_batch(np.random.default_rng(0), [4, 2, 1, 3], garbage=True)
        assert max_diff(clean["obs"], dirty["obs"]) > 1.0
        update = jax.jit(make_update(learning, axis_name=None))
        a, metrics_a = update(state, clean)
        b, metrics_b = update(state, dirty)
        assert max_diff(a.params, b.params) == 0.0
        assert max_diff(metrics_a, metrics_b) == 0.0
        assert max_diff(a.params, state.params) > 0.0  # the update did change something
        # The epoch program: whole padding sequences (any content) appended are never drawn.
        padded = _sequence_batch(np.random.default_rng(5), [0] * 6, garbage=True)
        more = jax.tree_util.tree_map(lambda x, y: np.concatenate([x, y]), dirty, padded)
        dp = DataParallel(learning, select_devices(1), 2, mode="jit")
        epochs = dp.epochs_on_device(3, num_minibatches=3)
        a, _ = epochs(dp.put_replicated(state), dp.put_replicated(clean))
        b, _ = epochs(dp.put_replicated(state), dp.put_replicated(more))
        assert int(a.step) == 9
        assert max_diff(a.params, b.params) == 0.0


def test_sequence_epochs_on_two_devices_equal_one():
    with jax.enable_x64(True):
        learning = _spec()[0].learning
        state = to_float64(jax.device_get(init_state(learning, 3)))
        data = _sequence_batch(np.random.default_rng(1), [4, 2, 1, 3, 0, 0, 4], garbage=True)
        out = []
        for n_dev, mode in ((1, "jit"), (2, "shard_map")):
            dp = DataParallel(learning, select_devices(n_dev), 2, mode=mode)
            after, _ = dp.epochs_on_device(2, num_minibatches=4)(dp.put_replicated(state),
                                                                 dp.put_replicated(data))
            out.append(jax.device_get(after.params))
        assert max_diff(out[0], out[1]) < TOL64


def _small_config(model=None, **training):
    model = model or {"fcnet_hiddens": [8], "use_lstm": True, "lstm_cell_size": 8,
                      "max_seq_len": 8}
    return (PPOConfig().environment(StatelessCartPole).env_runners(num_envs_per_env_runner=2)
            .training(**{"train_batch_size_per_learner": 128, "minibatch_size": 32,
                         "num_epochs": 2, **training})
            .rl_module(model_config=model).debugging(seed=4))


def test_rollouts_of_different_shapes_share_one_compiled_epoch_program():
    algo = _small_config().build()
    counts = []
    pad = algo.source.pad_sequences
    algo.source.pad_sequences = lambda a, cols: (counts.append(len(cols["seq_lens"])),
                                                 pad(a, cols))[1]
    for _ in range(3):
        result = algo.train()
        learner = result["learners"]["default_policy"]
        assert all(np.isfinite(learner[k]) for k in ("policy_loss", "vf_loss", "entropy"))
    assert len(set(counts)) > 1, counts  # the rollouts cut into different sequence counts
    assert algo.source._epochs._cache_size() == 1
    # The sampler records both networks' states; continued chunks start from the recorded
    # state one lookback step back.
    chunks, _ = algo.sample()
    state_out = chunks[0].get_extra_model_outputs("state_out")
    assert set(state_out) == {ACTOR, CRITIC} and set(state_out[CRITIC]) == {"h", "c"}
    continued = [c for c in chunks if c.t_started > 0]
    assert continued and all(c.len_lookback_buffer == 1 for c in continued)
    algo.stop()


def test_gru_checkpoint_restores_and_continues_exactly(tmp_path):
    config = _small_config({"fcnet_hiddens": [8], "use_gru": True, "lstm_cell_size": 8,
                            "max_seq_len": 8})
    algo = config.build()
    algo.train()
    algo.save(str(tmp_path / "ckpt"))
    back = Algorithm.from_checkpoint(str(tmp_path / "ckpt"), config)  # the env is a class
    assert type(back).__name__ == "PPO" and back.is_stateful
    # Envs are not part of a checkpoint (nor are they in RLlib): the restored run starts
    # new ones, so the original does too, and both go on from the same state.
    algo._sampler.close()
    algo._sampler = None
    ours, theirs = algo.train(), back.train()
    assert max_diff(jax.device_get(algo.state.params), jax.device_get(back.state.params)) == 0
    for key in ("total_loss", "vf_explained_var", "curr_kl_coeff"):
        assert ours["learners"]["default_policy"][key] == theirs["learners"][
            "default_policy"][key]
    assert back.compute_actions(np.zeros((3, 2), np.float32)).shape == (3,)
    algo.stop()
    back.stop()


def test_fine_tuning_starts_from_a_recurrent_bc_clone(tmp_path):
    record_expert("CartPole-v1", str(tmp_path / "data"), num_episodes=2, progress=False)
    model = {"fcnet_hiddens": [8], "use_lstm": True, "lstm_cell_size": 8, "max_seq_len": 8}
    bc = (BCConfig().environment("CartPole-v1").offline_data(input_=str(tmp_path / "data"))
          .training(num_updates_per_iteration=5, train_batch_size_per_learner=64)
          .rl_module(model_config=model)).build()
    bc.train()
    bc.save(str(tmp_path / "bc"))
    tuning = PPOConfig().environment("CartPole-v1").training(
        init_policy_from=str(tmp_path / "bc"), train_batch_size_per_learner=128,
        minibatch_size=32, num_epochs=1)
    with pytest.raises(ConfigError, match="value_warmup_updates=0"):
        tuning.build()
    ppo = tuning.training(value_warmup_updates=0).build()
    assert ppo.is_stateful
    assert max_diff(jax.device_get(bc.state.params["policy"]),
                    jax.device_get(ppo.state.params["policy"])) == 0.0
    assert np.isfinite(ppo.train()["learners"]["default_policy"]["total_loss"])
    ppo.stop()
    bc.stop()


def test_recurrent_config_errors_are_named():
    with pytest.raises(ConfigError, match="smaller than max_seq_len=20"):
        PPOConfig().training(minibatch_size=16, train_batch_size_per_learner=64).rl_module(
            model_config={"use_lstm": True, "max_seq_len": 20})
    with pytest.raises(ConfigError, match="value_warmup_updates=0"):
        PPOConfig().rl_module(model_config=LSTM).value_warmup_spec(sp.to_spec(OBS))


@pytest.mark.slow
def test_lstm_beats_mlp_on_stateless_cartpole_with_ppo():
    """The velocities are masked: PPO's MLP policy cannot tell which way the pole moves and
    stays near a random policy's return; the LSTM infers it and balances far longer."""

    def final_return(model_config):
        algo = (PPOConfig().environment("StatelessCartPole-v1")
                .env_runners(num_envs_per_env_runner=8).learners(num_devices=1)
                .training(train_batch_size_per_learner=1024, minibatch_size=256,
                          num_epochs=6, lr=1e-3, vf_loss_coeff=0.01, lambda_=0.95)
                .rl_module(model_config=model_config).debugging(seed=0)).build()
        for _ in range(ITERATIONS):
            algo.train()
        ret = algo.evaluate()["episode_return_mean"]
        algo.stop()
        return ret

    lstm = final_return({"fcnet_hiddens": [32], "use_lstm": True, "lstm_cell_size": 32,
                         "max_seq_len": 16})
    mlp = final_return({"fcnet_hiddens": [32, 32]})
    print(f"StatelessCartPole PPO greedy return after {ITERATIONS * 1024} env steps: "
          f"LSTM {lstm:.1f}, MLP {mlp:.1f}")
    assert lstm > 100 and lstm > 2 * mlp, (lstm, mlp)


ITERATIONS = 30
