"""The acting protocols: the one `Module` type every network is (`models.module`), the one
actor protocol `EnvRunner` speaks (`acting.protocol`: a plain callable brought into it once,
an object of the protocol driven as it is, its `custom_data` on each episode), the actor's
own window layout (`Actor.state_at` acts as `observe` leaves the window) and the connector
roles the actor reads the pipeline by."""

import gymnasium as gym
import jax
import numpy as np
import pytest

from rljax_offline.acting.actor import make_actor
from rljax_offline.acting.env_runner import EnvRunner
from rljax_offline.acting.protocol import ActorProtocol, CallableActor, as_actor
from rljax_offline.acting.window import window_reads
from rljax_offline.connectors import (
    Spaces,
    default_env_to_module,
    default_module_to_env,
    frame_stack,
    prev_actions_rewards,
)
from rljax_offline.connectors.common import add_observations, add_states
from rljax_offline.connectors.core import OBSERVATIONS, PREV_ACTIONS_REWARDS, ROLES, STATES
from rljax_offline.models.module import Module, acting_module
from rljax_offline.models.networks import continuous_q_network, value_network
from rljax_offline.models.policy import make_policy

OBS = gym.spaces.Box(-5, 5, (3,), np.float32)
ACT = gym.spaces.Discrete(3)
SPACES = Spaces.of(OBS, ACT)


def test_policies_values_and_qs_are_one_module_type():
    policy = make_policy(OBS, ACT, (8,))
    lstm = make_policy(OBS, ACT, (8,), use_lstm=True, lstm_cell_size=4)
    value = value_network(OBS, {"fcnet_hiddens": [8]})
    q = continuous_q_network(OBS, gym.spaces.Box(-1, 1, (2,)), {"fcnet_hiddens": [8]})
    for module in (policy, lstm, value, q):
        assert isinstance(module, Module)
    assert not policy.is_stateful and lstm.is_stateful and lstm.max_seq_len == 20
    obs = np.ones((5, 3), np.float32)
    params = policy.init(jax.random.PRNGKey(0))
    rows, _ = policy.steps(params, {"obs": obs})
    np.testing.assert_allclose(policy.head(params, rows), policy.apply(params, obs), rtol=1e-6)
    v_params = value.init(jax.random.PRNGKey(1))
    feats, _ = value.steps(v_params, {"obs": obs})
    np.testing.assert_allclose(value.head(v_params, feats), value.apply(v_params, obs),
                               rtol=1e-6)


def test_acting_module_runs_the_recurrent_policy_on_its_params_entry():
    lstm = make_policy(OBS, ACT, (8,), use_lstm=True, lstm_cell_size=4)
    params = {"q": lstm.init(jax.random.PRNGKey(0)), "other": np.zeros(2)}
    module = acting_module(lambda p, obs: obs, lstm.dist, lstm, "q")
    batch = {"obs": np.ones((2, 1, 3), np.float32), "state_in": lstm.initial_state(2)}
    out, state = module.forward(params, batch)
    want, want_state = lstm.forward(params["q"], batch)
    np.testing.assert_allclose(out, want)
    jax.tree_util.tree_map(np.testing.assert_allclose, state, want_state)
    assert module.initial_state is lstm.initial_state and module.dist is lstm.dist
    flat = acting_module(lambda p, obs: obs + 1, lstm.dist)  # feed-forward: `act` as it is
    assert not flat.is_stateful and flat.apply(None, 1) == 2


def test_pieces_declare_the_roles_the_actor_reads_them_by():
    assert ROLES == (OBSERVATIONS, PREV_ACTIONS_REWARDS, STATES)
    assert add_observations().role == OBSERVATIONS
    assert add_states(as_learner_connector=False).role == STATES
    assert prev_actions_rewards(1, 1).role == PREV_ACTIONS_REWARDS
    assert frame_stack(2).role == ""
    e2m = default_env_to_module(SPACES, frame_stack(3), prev_actions_rewards(2, 0))
    reads = window_reads(e2m, SPACES)
    assert (reads.observation_lookback, reads.prev_actions, reads.prev_rewards,
            reads.prev_steps, reads.stateful) == (2, True, False, 2, False)


def test_state_at_acts_as_the_window_observe_keeps():
    """`state_at(obs window, t, previous action and reward)` is the state the actor acts on
    after `observe` put the same steps in, resets included: the window's layout is the
    actor's alone, and export builds its graph on it."""
    e2m = default_env_to_module(SPACES, frame_stack(3), prev_actions_rewards(1, 1))
    policy = make_policy(e2m.out_spaces(SPACES).observation, ACT, (16,))
    params = policy.init(jax.random.PRNGKey(0))
    actor = make_actor(policy, SPACES, e2m, default_module_to_env(SPACES))
    rng = np.random.default_rng(0)
    n, L = 4, 2
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    state = actor.init(obs, jax.random.PRNGKey(0))
    hist = [[o] for o in obs]  # each env's observations since its reset
    t = np.zeros(n, np.int32)
    prev_a, prev_r = np.zeros(n, np.int64), np.zeros(n, np.float32)
    for step in range(7):
        actions, extras, state = actor.select_action(params, state)
        window = np.stack([np.stack(([np.zeros(3, np.float32)] * L + h)[-(L + 1):])
                           for h in hist])
        ref_actions, ref_extras, _ = actor.select_action(params, actor.state_at(
            window, t, prev_a, prev_r, obs_lookback=L))
        np.testing.assert_array_equal(np.asarray(actions), np.asarray(ref_actions))
        np.testing.assert_allclose(extras["action_dist_inputs"],
                                   ref_extras["action_dist_inputs"], rtol=1e-5, atol=1e-6)
        fresh = (np.arange(n) == step % n) if step % 3 == 2 else np.zeros(n, bool)
        rewards = rng.normal(size=n).astype(np.float32)
        obs = rng.normal(size=(n, 3)).astype(np.float32)
        state = actor.observe(state, rewards, obs, fresh)
        for i in range(n):
            hist[i] = [obs[i]] if fresh[i] else hist[i] + [obs[i]]
        t = np.where(fresh, 0, t + 1).astype(np.int32)
        prev_a = np.asarray(actions).astype(np.int64)
        prev_r = rewards


class _Alternating(ActorProtocol):
    """An actor of the protocol: action 0 and 1 in turn, each episode tagged."""

    def __init__(self):
        self.n, self.k, self.episodes = None, 0, 0

    def reset(self, obs, seed):
        self.n = len(obs)

    def select(self):
        self.k += 1
        return np.full(self.n, self.k % 2), {"turn": np.full(self.n, self.k, np.int64)}

    def observe(self, rewards, next_obs, fresh):
        pass

    def running(self, num_envs):
        return self.n == num_envs

    def custom_data(self, env):
        self.episodes += 1
        return {"tag": self.episodes}


def test_env_runner_drives_any_object_of_the_protocol():
    runner = EnvRunner("CartPole-v1", _Alternating(), num_envs=2, seed=0)
    episodes = runner.sample(num_episodes=3)
    assert all(ep.custom_data["tag"] >= 1 for ep in episodes)
    assert len({ep.custom_data["tag"] for ep in episodes}) == 3
    turns = np.concatenate([ep.get_extra_model_outputs("turn") for ep in episodes])
    assert turns.min() >= 1


def test_a_plain_callable_is_brought_into_the_protocol_once():
    expert = lambda obs: (obs[:, 2] > 0).astype(np.int64)  # noqa: E731
    runner = EnvRunner("CartPole-v1", expert, num_envs=2, seed=0)
    assert isinstance(runner.policy, CallableActor) and runner.policy.fn is expert
    assert isinstance(runner.policy, ActorProtocol)
    assert len(runner.sample(num_episodes=2)) == 2
    runner.policy = expert  # set later: wrapped the same way
    assert isinstance(runner.policy, CallableActor)
    actor = CallableActor(expert)
    assert as_actor(actor) is actor
    with pytest.raises(TypeError, match="actor"):
        as_actor(42)
