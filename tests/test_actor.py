"""The pure on-device actor gives the actions (and recurrent states) that `ConnectorPolicy`
gives on the same episodes, for a pipeline with lookback (frame stacking, previous actions
and rewards) and for an LSTM, across an env reset."""

import gymnasium as gym
import jax
import numpy as np
import pytest

from rljax_offline.connectors import (
    Spaces,
    default_env_to_module,
    default_module_to_env,
    frame_stack,
    prev_actions_rewards,
)
from rljax_offline.episode_builder import EpisodeBuilder
from rljax_offline.models.policy import make_policy
from rljax_offline.runners.acting import ConnectorPolicy
from rljax_offline.runners.actor import make_actor

OBS = gym.spaces.Box(-5, 5, (3,), np.float32)
ACT = gym.spaces.Discrete(3)
SPACES = Spaces.of(OBS, ACT)


@pytest.mark.parametrize("recurrent", [False, True])
def test_actor_matches_connector_policy_step_by_step(recurrent):
    S = 4 if recurrent else None
    pieces = [prev_actions_rewards(1, 1)] if recurrent else [frame_stack(3),
                                                            prev_actions_rewards(2, 1)]
    model = dict(use_lstm=True, lstm_cell_size=6, max_seq_len=4) if recurrent else {}
    probe = default_env_to_module(SPACES, *pieces)
    policy = make_policy(probe.out_spaces(SPACES).observation, ACT, (16,), **model)
    init_state = policy.initial_state() if recurrent else None
    e2m = default_env_to_module(SPACES, *pieces, max_seq_len=S, initial_state=init_state)
    m2e = default_module_to_env(SPACES)
    params = policy.init(jax.random.PRNGKey(0))
    actor = make_actor(policy, SPACES, e2m, m2e)
    reference = ConnectorPolicy(policy, params, SPACES, e2m, e2m.init(SPACES), m2e)

    rng = np.random.default_rng(0)
    T, N = 9, 2
    obs = rng.normal(size=(T + 1, N, 3)).astype(np.float32) * 2
    rewards = rng.normal(size=(T, N)).astype(np.float32)
    dones = np.zeros((T, N), bool)
    dones[3, 1] = True  # env 1 resets: obs[4, 1] is its new first observation
    state = actor.init(obs[0])
    builders = [EpisodeBuilder(observation_space=OBS, action_space=ACT) for _ in range(N)]
    for i, b in enumerate(builders):
        b.add_env_reset(obs[0, i])
    for t in range(T):
        actions, extras, state = actor.select_action(params, state, jax.random.PRNGKey(t))
        want, want_extras = reference.act(builders, t)
        np.testing.assert_array_equal(np.asarray(actions), want)
        if recurrent:
            np.testing.assert_allclose(extras["state_out"]["h"], want_extras["state_out"]["h"],
                                       rtol=1e-5, atol=1e-6)
        state = actor.observe(state, extras, rewards[t], obs[t + 1], dones[t])
        for i in range(N):
            if dones[t, i]:
                builders[i] = EpisodeBuilder(observation_space=OBS, action_space=ACT)
                builders[i].add_env_reset(obs[t + 1, i])
                continue
            emo = {k: jax.tree_util.tree_map(lambda x, i=i: np.asarray(x)[i], v)
                   for k, v in want_extras.items() if k == "state_out"}
            builders[i].add_env_step(obs[t + 1, i], int(want[i]), float(rewards[t, i]),
                                     extra_model_outputs=emo or None)


def test_env_runner_with_the_actor_records_the_same_episodes():
    """`ActorPolicy` (on-device window) and `ConnectorPolicy` (builders' windows) drive
    EnvRunner to the same episodes, across resets."""
    from rljax_offline.runners.acting import ActorPolicy
    from rljax_offline.runners.env_runner import EnvRunner

    env = gym.make("CartPole-v1")
    spaces = Spaces.of(env.observation_space, env.action_space)
    e2m = default_env_to_module(spaces, frame_stack(2), prev_actions_rewards(1, 1))
    policy = make_policy(e2m.out_spaces(spaces).observation, env.action_space, (8,))
    params = policy.init(jax.random.PRNGKey(3))
    runs = []
    for cls in (ConnectorPolicy, ActorPolicy):
        acting = cls(policy, params, spaces, e2m, e2m.init(spaces),
                     default_module_to_env(spaces))
        runner = EnvRunner("CartPole-v1", acting, num_envs=3, seed=5)
        runs.append(list(runner.episodes(num_episodes=6)))
    assert [len(e) for e in runs[0]] == [len(e) for e in runs[1]]
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a.get_actions(), b.get_actions())


def test_actor_can_update_the_env_to_module_filter_as_rllibs_env_runners():
    from connector_testlib import NumpyMeanStd

    from rljax_offline.connectors import mean_std_filter

    e2m = default_env_to_module(SPACES, mean_std_filter())
    policy = make_policy(OBS, ACT, (8,))
    params = policy.init(jax.random.PRNGKey(0))
    actor = make_actor(policy, SPACES, e2m, default_module_to_env(SPACES),
                       update_env_to_module=True)
    rng = np.random.default_rng(1)
    obs = rng.normal(size=(6, 2, 3)).astype(np.float32)
    ref = NumpyMeanStd((3,))
    actions, extras, state = actor.select_action(params, actor.init(obs[0]), None)
    for t in range(1, 6):
        actions, extras, state = actor.observe_and_select(
            params, state, extras, np.zeros(2, np.float32), obs[t], np.zeros(2, bool), None)
    for x in obs.reshape(-1, 3):  # each env's observation pushed once, env order per step
        ref.push(x)
    (stats, *_) = state.pipeline_state
    assert int(stats.count) == 12
    np.testing.assert_allclose(stats.mean, ref.mean, rtol=1e-5, atol=1e-6)
