"""The on-device actor acts as the connector pipelines do on the episodes so far (the lookback
windows of the builders, batched): for a pipeline with lookback (frame stacking, previous
actions and rewards) and for an LSTM, across env resets; `EnvRunner` driving `ActorPolicy`
records those actions and the extra outputs (`action_logp`, `action_dist_inputs`,
`state_out`); the env-to-module filter can learn while acting, as RLlib's env runners do."""

import gymnasium as gym
import jax
import numpy as np
import pytest

from rljax_offline.acting.actor import ActorPolicy, make_actor
from rljax_offline.acting.env_runner import EnvRunner
from rljax_offline.connectors import (
    Context,
    Spaces,
    default_env_to_module,
    default_module_to_env,
    frame_stack,
    prev_actions_rewards,
)
from rljax_offline.episode.batch import EpisodeBatch
from rljax_offline.episode.builder import EpisodeBuilder
from rljax_offline.models.policy import make_policy

OBS = gym.spaces.Box(-5, 5, (3,), np.float32)
ACT = gym.spaces.Discrete(3)
SPACES = Spaces.of(OBS, ACT)


def greedy_from_builders(policy, params, spaces, e2m, builders, K):
    """The reference: the env-to-module pipeline on the builders' last K steps batched as
    `EpisodeBatch` lookback windows, the policy, argmax; the latest `state_out` (recorded per
    step) in the last lookback column for a recurrent policy."""
    windows = [b.lookback_window(K, extra_model_outputs=False) for b in builders]
    episodes = EpisodeBatch.from_episodes(windows, max_len=0, len_lookback_buffer=K)
    if policy.is_stateful:
        latest = [b.get_extra_model_outputs("state_out", -1) if len(b)
                  else policy.initial_state() for b in builders]
        column = jax.tree_util.tree_map(
            lambda *xs: np.concatenate([np.zeros((len(xs), K - 1, *np.shape(xs[0])),
                                                 np.float32), np.stack(xs)[:, None]], 1),
            *latest)
        episodes = episodes.replace(extra_model_outputs={"state_out": column})
    return _jitted_reference(policy, e2m)(params, e2m.init(spaces), episodes)


def _jitted_reference(policy, e2m, cache={}):  # noqa: B006 (a cache by design)
    key = (id(policy), id(e2m))
    if key not in cache:
        def act(params, e2m_state, episodes):
            _, batch, _ = e2m.apply(e2m_state, episodes, {}, Context(params=params, frozen=True))
            if policy.is_stateful:
                logits, state_out = policy.forward(params, batch)
                return logits[:, 0].argmax(-1), state_out
            return policy.apply(params, batch["obs"]).argmax(-1), None

        cache[key] = (policy, e2m, jax.jit(act))  # holds them: ids stay theirs
    return cache[key][2]


def _setup(recurrent):
    S = 4 if recurrent else None
    pieces = [prev_actions_rewards(1, 1)] if recurrent else [frame_stack(3),
                                                            prev_actions_rewards(2, 1)]
    model = dict(use_lstm=True, lstm_cell_size=6, max_seq_len=4) if recurrent else {}
    probe = default_env_to_module(SPACES, *pieces)
    policy = make_policy(probe.out_spaces(SPACES).observation, ACT, (16,), **model)
    init_state = policy.initial_state() if recurrent else None
    e2m = default_env_to_module(SPACES, *pieces, max_seq_len=S, initial_state=init_state)
    return policy, e2m, policy.init(jax.random.PRNGKey(0))


@pytest.mark.parametrize("recurrent", [False, True])
def test_actor_matches_the_pipeline_on_the_episodes_so_far(recurrent):
    policy, e2m, params = _setup(recurrent)
    actor = make_actor(policy, SPACES, e2m, default_module_to_env(SPACES))
    fused = make_actor(policy, SPACES, e2m, default_module_to_env(SPACES))
    rng = np.random.default_rng(0)
    T, N = 9, 2
    obs = rng.normal(size=(T + 1, N, 3)).astype(np.float32) * 2
    rewards = rng.normal(size=(T, N)).astype(np.float32)
    fresh = np.zeros((T, N), bool)
    fresh[3, 1] = True  # env 1 resets: obs[4, 1] is its new first observation
    state = actor.init(obs[0], jax.random.PRNGKey(0))
    fused_state = fused.init(obs[0], jax.random.PRNGKey(0))
    _, _, fused_state = fused.select_action(params, fused_state)
    builders = [EpisodeBuilder(observation_space=OBS, action_space=ACT) for _ in range(N)]
    for i, b in enumerate(builders):
        b.add_env_reset(obs[0, i])
    for t in range(T):
        actions, extras, state = actor.select_action(params, state)
        want, want_state = greedy_from_builders(policy, params, SPACES, e2m, builders,
                                                actor.window)
        np.testing.assert_array_equal(np.asarray(actions), want)
        assert set(extras) == {"action_logp", "action_dist_inputs"} | (
            {"state_out"} if recurrent else set())
        if recurrent:
            np.testing.assert_allclose(extras["state_out"]["h"], want_state["h"],
                                       rtol=1e-5, atol=1e-6)
        if t:  # the fused observe + select gives the same
            fused_actions, _, fused_state = fused.step(params, fused_state, rewards[t - 1],
                                                       obs[t], fresh[t - 1])
            np.testing.assert_array_equal(np.asarray(fused_actions), want)
        state = actor.observe(state, rewards[t], obs[t + 1], fresh[t])
        for i in range(N):
            if fresh[t, i]:
                builders[i] = EpisodeBuilder(observation_space=OBS, action_space=ACT)
                builders[i].add_env_reset(obs[t + 1, i])
                continue
            emo = {"state_out": jax.tree_util.tree_map(lambda x, i=i: np.asarray(x)[i],
                                                       extras["state_out"])} \
                if recurrent else None
            builders[i].add_env_step(obs[t + 1, i], int(want[i]), float(rewards[t, i]),
                                     extra_model_outputs=emo)


@pytest.mark.parametrize("recurrent", [False, True])
def test_env_runner_records_what_the_pipeline_chooses_on_each_episode(recurrent):
    """Across vector-env autoresets, every recorded action is the pipeline's greedy action on
    that episode so far, and the recorded outputs belong to it."""
    env = gym.make("CartPole-v1")
    spaces = Spaces.of(env.observation_space, env.action_space)
    pieces = [prev_actions_rewards(1, 1)] if recurrent else [frame_stack(2),
                                                            prev_actions_rewards(1, 1)]
    model = dict(use_lstm=True, lstm_cell_size=5, max_seq_len=3) if recurrent else {}
    probe = default_env_to_module(spaces, *pieces)
    policy = make_policy(probe.out_spaces(spaces).observation, env.action_space, (8,), **model)
    e2m = default_env_to_module(spaces, *pieces, max_seq_len=3 if recurrent else None,
                                initial_state=policy.initial_state() if recurrent else None)
    params = policy.init(jax.random.PRNGKey(3))
    acting = ActorPolicy(policy, params, spaces, e2m, None, default_module_to_env(spaces))
    runner = EnvRunner("CartPole-v1", acting, num_envs=3, seed=5)
    episodes = list(runner.episodes(num_episodes=5))
    assert len(episodes) == 5 and all(ep.is_done for ep in episodes)
    for ep in episodes:
        emo = ep.extra_model_outputs
        logits = emo["action_dist_inputs"]
        assert logits.shape == (len(ep), 2) and emo["action_logp"].shape == (len(ep),)
        np.testing.assert_array_equal(ep.get_actions(), logits.argmax(-1))
        logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        np.testing.assert_allclose(emo["action_logp"], logp[np.arange(len(ep)), ep.actions],
                                   rtol=1e-5, atol=1e-5)
        if recurrent:
            assert emo["state_out"]["h"].shape == (len(ep), 5)
        replay = EpisodeBuilder(observation_space=spaces.observation,
                                action_space=spaces.action)
        replay.add_env_reset(ep.observations[0])
        for t in range(len(ep)):
            want, want_state = greedy_from_builders(policy, params, spaces, e2m, [replay],
                                                    acting.actor.window)
            assert int(want[0]) == int(ep.actions[t])
            out = None
            if recurrent:
                np.testing.assert_allclose(want_state["h"][0], emo["state_out"]["h"][t],
                                           rtol=1e-5, atol=1e-6)
                out = {"state_out": jax.tree_util.tree_map(lambda x, t=t: x[t],
                                                           emo["state_out"])}
            replay.add_env_step(ep.observations[t + 1], int(ep.actions[t]),
                                float(ep.rewards[t]), extra_model_outputs=out)


def test_exploring_actor_is_reproducible_and_samples():
    env = gym.make("CartPole-v1")
    spaces = Spaces.of(env.observation_space, env.action_space)
    e2m = default_env_to_module(spaces)
    policy = make_policy(spaces.observation, env.action_space, (8,))
    params = jax.tree_util.tree_map(lambda x: x * 0, policy.init(jax.random.PRNGKey(0)))

    def run(seed):
        acting = ActorPolicy(policy, params, spaces, e2m, None, default_module_to_env(spaces),
                             explore=True)
        return EnvRunner("CartPole-v1", acting, num_envs=2, seed=seed).sample(num_timesteps=60)

    a, b = run(1), run(1)
    actions = np.concatenate([ep.get_actions() for ep in a])
    np.testing.assert_array_equal(actions, np.concatenate([ep.get_actions() for ep in b]))
    assert 0 < actions.mean() < 1  # uniform logits: both actions get sampled
    np.testing.assert_allclose(a[0].extra_model_outputs["action_logp"], np.log(0.5), rtol=1e-6)


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
    _, _, state = actor.select_action(params, actor.init(obs[0], jax.random.PRNGKey(0)))
    for t in range(1, 6):
        _, _, state = actor.step(params, state, np.zeros(2, np.float32), obs[t],
                                 np.zeros(2, bool))
    for x in obs.reshape(-1, 3):  # each env's observation pushed once, env order per step
        ref.push(x)
    (stats, *_) = state.pipeline_state
    assert int(stats.count) == 12
    np.testing.assert_allclose(stats.mean, ref.mean, rtol=1e-5, atol=1e-6)


def test_select_before_reset_and_bad_action_spaces_are_named_errors():
    policy = make_policy(OBS, ACT, (8,))
    acting = ActorPolicy(policy, policy.init(jax.random.PRNGKey(0)), SPACES)
    with pytest.raises(RuntimeError, match="before reset"):
        acting.select()
    tuple_space = Spaces.of(OBS, gym.spaces.Tuple([ACT, ACT]))
    with pytest.raises(ValueError, match="action space"):
        make_actor(policy, tuple_space)


def test_box_actions_in_the_window_are_the_recorded_clipped_ones():
    """With previous actions as input, the window holds the actions as recorded (clipped into
    the Box), so acting sees what the learner will see in the episodes: mean `5 - 2 * prev`
    gives 5 -> 2 (clipped), then 1, then 3 -> 2, ..."""
    env = gym.make("Pendulum-v1")
    spaces = Spaces.of(env.observation_space, env.action_space)
    e2m = default_env_to_module(spaces, prev_actions_rewards(1, 0))
    assert e2m.out_spaces(spaces).observation.shape == (4,)  # [cos, sin, speed, prev action]

    def module(obs):
        prev = obs[:, -1]
        return jax.numpy.stack([5.0 - 2.0 * prev, jax.numpy.full_like(prev, -20.0)], -1)

    runner = EnvRunner("Pendulum-v1", module, num_envs=2, env_to_module=e2m,
                       module_to_env=default_module_to_env(spaces))
    ep = runner.sample(num_timesteps=8)[0]
    np.testing.assert_allclose(ep.actions[:, 0], [2.0, 1.0, 2.0, 1.0], atol=1e-6)
