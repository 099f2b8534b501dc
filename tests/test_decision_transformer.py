"""Decision Transformer (Box and Discrete): d3rlpy's names and defaults, the one-line
refusals, acting that carries its context (each step's output equals the network on the
window the learner would cut, returns-to-go counted down from `target_return`), the exported
step acting as the actor, off-policy evaluation's named refusal, and learning on mixed
CartPole where the return conditioning is what matters.

(8 devices == 1, the three update modes, masked rows, exact resume: the cross-cutting tests
from the registry lines; their settings are in `learner_testlib.CASE_TRAINING`.)"""

import gymnasium as gym
import jax
import numpy as np
import pytest
from offline_rl_testlib import spec_of
from test_export_stateful import _as_signed, _assert_acts_as_the_actor, _lanes, _replay

from rljax_offline import ope
from rljax_offline.algorithms.config import ConfigError
from rljax_offline.algorithms.decision_transformer import (
    DecisionTransformerConfig,
    DiscreteDecisionTransformerConfig,
)
from rljax_offline.apps.recipes import record_mixed
from rljax_offline.connectors import Spaces
from rljax_offline.errors import OPEError
from rljax_offline.export import load_stablehlo
from rljax_offline.learning.init import init_state
from rljax_offline.learning.update import BatchAxis

SMALL = {"fcnet_hiddens": [16]}
TINY = dict(context_size=3, num_layers=1, num_heads=2, attn_dropout=0.0, resid_dropout=0.0,
            embed_dropout=0.0)


def test_d3rlpy_defaults():
    box, disc = DecisionTransformerConfig(), DiscreteDecisionTransformerConfig()
    assert (box.context_size, box.max_timestep, box.lr, box.num_heads, box.num_layers,
            box.activation_type, box.position_encoding_type, box.attn_dropout,
            box.train_batch_size_per_learner) == (20, 1000, 1e-4, 1, 3, "relu", "simple",
                                                  0.1, 64 * 20)
    assert (disc.lr, disc.num_heads, disc.num_layers, disc.activation_type,
            disc.embed_activation_type, disc.position_encoding_type, disc.warmup_tokens,
            disc.final_tokens, disc.train_batch_size_per_learner) == (
        6e-4, 8, 6, "gelu", "tanh", "global", 10240, 30000000, 128 * 20)
    assert box.target_return is None and box.grad_clip is None
    assert box.sample_unit == disc.sample_unit == "windows"  # d3rlpy's trajectory windows


BOX = (gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32))
DISCRETE = (gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2))


@pytest.mark.parametrize("config, spaces, message", [
    (DecisionTransformerConfig().training(target_return=1.0), DISCRETE,
     "DecisionTransformerConfig needs Box actions .*DiscreteDecisionTransformerConfig"),
    (DiscreteDecisionTransformerConfig().training(target_return=1.0), BOX,
     "DiscreteDecisionTransformerConfig needs Discrete actions"),
    (DecisionTransformerConfig().training(target_return=1.0),
     (BOX[0], gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)), "bound"),
    (DecisionTransformerConfig(), BOX, "set target_return"),
    (DecisionTransformerConfig().training(target_return=1.0, num_heads=3), BOX,
     "num_heads=3 must divide the embedding width 256"),
])
def test_what_it_cannot_do_is_a_one_line_config_error(config, spaces, message):
    with pytest.raises(ConfigError, match=message):
        spec_of(config, *spaces)


def test_windows_are_for_a_transformer_on_materialized_data():
    """`sample_unit='windows'` elsewhere is a one-line error naming the option."""
    from rljax_offline import BCConfig
    with pytest.raises(ConfigError, match="sample_unit='windows' .* streams its data"):
        DecisionTransformerConfig().offline_data(materialize_data=False,
                                                 materialize_mapped_data=False).validate()
    with pytest.raises(ConfigError, match="BCConfig: sample_unit='windows' .* single steps"):
        BCConfig().offline_data(sample_unit="windows").policy_parts(Spaces.of(*BOX))
    with pytest.raises(ConfigError, match="reads a recurrent state"):
        BCConfig().offline_data(sample_unit="windows").rl_module(
            model_config={"use_lstm": True, "max_seq_len": 4}).policy_parts(Spaces.of(*BOX))


def test_a_recurrent_model_config_is_refused():
    with pytest.raises(ConfigError, match="the transformer is the sequence model: drop use_lstm"):
        DecisionTransformerConfig().rl_module(model_config={"use_lstm": True})


def _acting_vs_learner(config, obs_dim, act_space, steps=7, seed=0):
    """Acting step by step over one episode, and the loss on every window the learner would
    cut ending at each step (returns-to-go counted down from the target, its timesteps):
    the per-step figures that must agree."""
    rng = np.random.default_rng(seed)
    discrete = isinstance(act_space, gym.spaces.Discrete)
    A = act_space.n if discrete else 1
    obs_space = gym.spaces.Box(-10, 10, (obs_dim + A + 1,), np.float32)
    spec = spec_of(config, obs_space, act_space)
    params = init_state(spec.learning, seed).params
    policy = spec.acting.policy
    raw = rng.uniform(-1, 1, (steps, obs_dim)).astype(np.float32)
    actions = (rng.integers(0, A, steps) if discrete
               else rng.uniform(-2, 2, (steps, 1)).astype(np.float32))
    rewards = rng.normal(size=steps).astype(np.float32)
    enc = np.eye(A, dtype=np.float32)[actions] if discrete else actions
    prev_a = np.concatenate([np.zeros((1, A), np.float32), enc[:-1]])
    prev_r = np.concatenate([[0.0], rewards[:-1]]).astype(np.float32)
    tokens = np.concatenate([raw, prev_a, prev_r[:, None]], axis=1)
    state, acted = policy.initial_state(1), []
    for t in range(steps):
        out, state = policy.forward(params["policy"], {"obs": tokens[None, t:t + 1],
                                                       "state_in": state,
                                                       "seq_lens": np.ones(1, np.int32)})
        acted.append(np.asarray(out)[0, 0])
    C = config.context_size
    rtg = config.target_return - np.concatenate([[0.0], np.cumsum(rewards)[:-1]])
    windows = [np.arange(max(0, t - C + 1), t + 1) for t in range(steps)]

    def cut(x):
        return np.stack([np.concatenate([x[w], np.zeros((C - len(w), *x.shape[1:]), x.dtype)])
                         for w in windows])

    batch = {"obs": cut(tokens), "actions": cut(np.asarray(actions)),
             "returns_to_go": cut(rtg.astype(np.float32)),
             "timesteps": cut(np.arange(steps, dtype=np.int32)),
             "seq_lens": np.array([len(w) for w in windows], np.int32),
             "loss_mask": cut(np.ones(steps, bool))}
    keys = jax.random.split(jax.random.PRNGKey(0), steps * C).reshape(steps, C, 2)
    loss, _ = spec.learning.losses[0].fn(params, batch, keys, BatchAxis())
    last = np.asarray(loss)[np.arange(steps), batch["seq_lens"] - 1]
    return np.stack(acted), actions, last


@pytest.mark.parametrize("position", ["simple", "global"])
def test_discrete_acting_carries_the_context_the_learner_cuts(position):
    """The context (observations with the previous action and reward, returns-to-go counted
    down from `target_return`, timesteps) slides over the episode past `context_size`: each
    step's logits give the data's action the log-probability the learner's loss gives it on
    the window ending there."""
    config = DiscreteDecisionTransformerConfig().training(
        target_return=3.0, return_scale=0.5, position_encoding_type=position,
        **TINY).rl_module(model_config=SMALL)
    logits, actions, loss = _acting_vs_learner(config, 4, DISCRETE[1])
    logp = jax.nn.log_softmax(logits)[np.arange(len(actions)), actions]
    np.testing.assert_allclose(-logp, loss, rtol=1e-5, atol=1e-6)


def test_box_acting_carries_the_context_the_learner_cuts():
    config = DecisionTransformerConfig().training(target_return=-5.0, **TINY).rl_module(
        model_config=SMALL)
    pre_tanh, actions, loss = _acting_vs_learner(config, 3, BOX[1])
    unit = actions / 2.0  # Box(-2, 2) scaled into [-1, 1]
    np.testing.assert_allclose(np.sum((np.tanh(pre_tanh) - unit) ** 2, -1), loss,
                               rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def cartpole_mixed(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("cartpole_mixed"))
    record_mixed("cartpole-mixed-small", path)
    return path


def cartpole_config(data, updates, **training):
    return (DiscreteDecisionTransformerConfig().environment("CartPole-v1")
            .offline_data(input_=data)
            .training(num_updates_per_iteration=updates, context_size=10, num_layers=2,
                      num_heads=2, lr=1e-3, warmup_tokens=0, train_batch_size_per_learner=640,
                      **{"target_return": 500.0, "return_scale": 0.01, **training})
            .rl_module(model_config={"fcnet_hiddens": [64]}).learners(num_devices=1)
            .evaluation(evaluation_interval=0, evaluation_duration=10).debugging(seed=0))


def test_exported_step_acts_as_the_actor_and_ope_refuses_it(cartpole_mixed, tmp_path):
    """Export follows from the registry line: the step graph takes the previous action and
    reward and the context as its state, and replays the actor's episodes (resets
    mid-stream included) exactly. OPE needs a feed-forward policy: a named error."""
    algo = cartpole_config(cartpole_mixed, 3).build()
    algo.train()
    path = algo.export_policy(str(tmp_path / "dt.stablehlo"))
    inputs, ref_actions, ref_logits, mask = _lanes(algo, "CartPole-v1")
    names = ("obs", "prev_actions", "prev_rewards", "t")
    from rljax_offline.export import initial_state
    state = {k: np.full_like(v, 0.5) for k, v in initial_state(path, 3).items()}
    actions, logits = _replay(load_stablehlo(path), _as_signed(inputs, path), names, state)
    _assert_acts_as_the_actor(actions, logits, ref_actions, ref_logits, mask)
    with pytest.raises(OPEError, match="needs a feed-forward acting policy"):
        ope.estimate(algo.policy(), cartpole_mixed, methods={"is": {"type": "is"}})
    algo.stop()


def test_windows_and_fixed_sequences_train_on_the_same_steps(cartpole_mixed):
    """Both sample units train from the same data: windows ending anywhere (flat rows kept)
    or RLlib's fixed sequences (rows of `context_size` steps); each update covers
    `train_batch_size_per_learner` timesteps of context."""
    algos = {unit: cartpole_config(cartpole_mixed, 2).offline_data(
        sample_unit=unit).build() for unit in ("windows", "timesteps")}
    for algo in algos.values():
        loss = algo.train()["learners"]["default_policy"]["policy_loss"]
        assert np.isfinite(loss) and algo.timesteps_per_update == 640
    windows, fixed = algos["windows"], algos["timesteps"]
    assert windows.num_timesteps == fixed.num_timesteps > 0
    assert windows.data.device_data.columns["obs"].ndim == 2  # steps, cut as sampled
    assert fixed.data.device_data.columns["obs"].shape[1] == 10  # sequences of 10
    for algo in algos.values():
        algo.stop()


@pytest.mark.slow
def test_return_conditioning_is_what_it_learns_on_mixed_cartpole(cartpole_mixed, tmp_path):
    """5% expert episodes, 95% poor ones (behavior cloning scores well under 100). After
    1,500 updates (about 30 s on 2 CPU cores), conditioned on a return of 500 it clears 300
    and beats itself conditioned on a return of 10 by 100. The key term removed once (the
    returns-to-go zeroed, `return_scale` 1e-9: behavior cloning of the mix), the same run
    scores well under 300 and fails the first check: measured at 500 updates 83.9 (target
    500) / 14.5 (target 10) / 20.3 (zeroed); 1,500: see the module's guide. That ablation is
    not rerun here: it doubled the test's time and shows nothing the threshold does not."""
    config = cartpole_config(cartpole_mixed, 1500)
    algo = config.build()
    algo.train()
    high = algo.evaluate()["episode_return_mean"]
    algo.save(str(tmp_path / "dt"))
    algo.stop()
    from rljax_offline import Algorithm
    low_algo = Algorithm.from_checkpoint(str(tmp_path / "dt"),
                                         config.training(target_return=10.0))
    low = low_algo.evaluate()["episode_return_mean"]
    low_algo.stop()
    print(f"target 500: {high}, target 10: {low}")
    assert high >= 300 and high > low + 100, (high, low)
