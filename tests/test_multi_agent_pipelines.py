"""RLlib's observation preprocessors, per-agent frame windows and per-module / per-agent
mean-std statistics in the default multi-agent pipelines, on the randomized asynchronous
traces (skips, hanging actions, late joiners): each answer is checked against an
independent route (RLlib-verified getters, the single-agent pipeline on one agent alone,
numpy statistics)."""

from __future__ import annotations

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import test_multi_agent_episode_rllib as T

from rljax_offline.connectors import (
    Context,
    Spaces,
    default_learner,
    default_multi_agent_env_to_module,
    default_multi_agent_learner,
    frame_stack,
    mean_std_filter,
    mean_std_filter_per_agent,
    multi_agent_observation_preprocessor,
    single_agent_observation_preprocessor,
)
from rljax_offline.episode.batch import EpisodeBatch
from rljax_offline.errors import ConfigError, ModuleSpaceMismatchError, MultiAgentEpisodeError

fixture = T.fixture
AGENTS = ("a0", "a1", "a2", "a3")
OBS = {a: T.OBS_SPACE for a in AGENTS}
ACT = {a: T.ACT_SPACE for a in AGENTS}


def episodes(fx, n, start=0):
    out = []
    for i, tr in enumerate(fx["traces"][start:], start):
        if tr["rllib_error"] is None:
            out.append(T.build(fx, i, tr["steps"]).finalize())
        if len(out) == n:
            return out
    return out


def _sum_others(obs):
    total = sum(obs.values())
    return {a: jnp.concatenate([o, total]) for a, o in obs.items()}


def _box4(spaces):
    return {a: gym.spaces.Box(-1e4, 1e4, (4,), np.float32) for a in spaces}


def test_multi_agent_preprocessor_sees_each_env_steps_observation_dict(fixture):
    pre = multi_agent_observation_preprocessor(_sum_others, _box4)
    eps = episodes(fixture, 12)
    chunks = [ep[1:len(ep)] for ep in eps if len(ep) > 3]  # slices keep one step of lookback
    for ep, new in zip(eps + chunks, pre.apply(eps + chunks)):
        steps = list(range(len(ep) + 1))
        before = ep.get_observations(steps, return_list=True)
        after = new.get_observations(steps, return_list=True)
        for b, a in zip(before, after):
            want = _sum_others({k: jnp.asarray(v) for k, v in b.items()})
            assert set(a) == set(want)
            for k in want:
                np.testing.assert_allclose(a[k], want[k], rtol=1e-6)
        for sa in new.agent_episodes.values():
            assert sa.observation_space_spec.shape == (4,)
    assert pre.observation_spaces(OBS)["a1"].shape == (4,)
    # in a pipeline: the module sees the preprocessed observations and spaces
    learner = default_multi_agent_learner(OBS, ACT, fixture["modules"],
                                          multi_agent_preprocessors=[pre], agent_ids=AGENTS)
    assert learner.out_spaces()["m0"].observation.shape == (4,)
    mb, _ = learner.apply(learner.init(), eps[:3], rows=8)
    eps_id, agent_id = mb.structure["m1"][0]
    sa = next(e for e in pre.apply(eps[:3]) if e.id_ == eps_id).agent_episodes[agent_id]
    np.testing.assert_allclose(np.asarray(mb.data["m1"]["obs"])[:len(sa)],
                               np.asarray(sa.observations)[:len(sa)], rtol=1e-6)


def test_multi_agent_preprocessor_must_answer_every_observed_agent(fixture):
    (ep,) = episodes(fixture, 1)
    drop = multi_agent_observation_preprocessor(lambda obs: dict(list(obs.items())[:1]))
    with pytest.raises(MultiAgentEpisodeError, match=r"returned observations for .*expected"):
        drop.apply([ep])


def test_single_agent_preprocessor_per_row_and_agent_under_jit():
    box = gym.spaces.Box(-5, 5, (3,), np.float32)
    scale = single_agent_observation_preprocessor(
        lambda o, i: jnp.concatenate([o * (i + 1), o[:1]]),
        lambda obs_space, act_space: gym.spaces.Box(-20, 20, (4,), np.float32))
    rng = np.random.default_rng(0)
    from rljax_offline.episode.episode import Episode
    eps = [Episode(observations=rng.normal(size=(n + 1, 3)).astype(np.float32),
                   actions=np.zeros(n, np.int64), rewards=np.zeros(n), observation_space=box)
           for n in (3, 5)]
    eb = EpisodeBatch.from_episodes(eps)
    spaces = Spaces.of(box, gym.spaces.Discrete(2))
    assert scale.out_spaces(spaces).observation.shape == (4,)
    ctx = Context(agent_index=jnp.asarray([0, 2]))
    out, _, _ = jax.jit(scale.apply)((), eb, {}, ctx)
    for row, (ep, k) in enumerate(zip(eps, (0, 2))):
        n = len(ep) + 1
        x = np.asarray(ep.observations)
        want = np.concatenate([x * (k + 1), x[:, :1]], axis=1)
        np.testing.assert_allclose(np.asarray(out.observations[row, :n]), want, rtol=1e-6)
    alone, _, _ = scale.apply((), eb, {}, Context())  # single-agent: every row is agent 0
    np.testing.assert_allclose(np.asarray(alone.observations[1, :6, :3]), eps[1].observations,
                               rtol=1e-6)


@pytest.mark.parametrize("per_agent", [False, True])
def test_mean_std_statistics_per_module_or_per_agent(fixture, per_agent):
    eps = episodes(fixture, 10)
    piece = (mean_std_filter_per_agent(len(AGENTS), as_learner_connector=True, clip=None)
             if per_agent else mean_std_filter(as_learner_connector=True, clip=None))
    learner = default_multi_agent_learner(OBS, ACT, {a: "m" for a in AGENTS}, piece,
                                          agent_ids=AGENTS)
    mb, states = learner.apply(learner.init(), eps, rows=64)
    stats = states["m"][0]  # the filter is the first piece
    for g in ([[a] for a in AGENTS] if per_agent else [list(AGENTS)]):
        obs = np.concatenate([np.asarray(ep.agent_episodes[a].observations)
                              for ep in eps for a in g if a in ep.agent_episodes
                              and len(ep.agent_episodes[a]) > 0])
        k = AGENTS.index(g[0]) if per_agent else ()
        assert float(np.asarray(stats.count)[k]) == len(obs)
        np.testing.assert_allclose(np.asarray(stats.mean)[k], obs.mean(0), rtol=1e-4)
        np.testing.assert_allclose(np.asarray(stats.m2)[k], ((obs - obs.mean(0)) ** 2).sum(0),
                                   rtol=1e-3)
    if per_agent:  # one agent's rows equal the single-agent filter on that agent alone
        sa_eps = [ep.agent_episodes["a1"] for ep in eps if "a1" in ep.agent_episodes
                  and len(ep.agent_episodes["a1"]) > 0]
        alone = default_learner(Spaces.of(T.OBS_SPACE, T.ACT_SPACE),
                                mean_std_filter(as_learner_connector=True, clip=None))
        _, want, _ = jax.jit(alone.apply)(alone.init(Spaces.of(T.OBS_SPACE, T.ACT_SPACE)),
                                          EpisodeBatch.from_episodes(sa_eps), {}, Context())
        got = mb.data["m"]
        mine = (np.asarray(got["agent_index"]) == 1) & np.asarray(got["loss_mask"])
        np.testing.assert_allclose(np.asarray(got["obs"])[mine],
                                   np.asarray(want["obs"])[np.asarray(want["loss_mask"])],
                                   rtol=1e-4, atol=1e-5)


def test_learner_rows_stack_each_agents_own_frames_and_compile_once(fixture):
    learner = default_multi_agent_learner(OBS, ACT, fixture["modules"], frame_stack(3),
                                          agent_ids=AGENTS)
    spaces = Spaces.of(T.OBS_SPACE, T.ACT_SPACE)
    single = default_learner(spaces, frame_stack(3))
    single_apply, single_state = jax.jit(single.apply), single.init(spaces)
    assert learner.out_spaces()["m1"].observation.shape == (6,)
    state = learner.init()
    for start in (0, 40, 80):  # different agent sets, one compiled shape per module
        eps = episodes(fixture, 6, start)
        mb, state = learner.apply(state, eps, rows=32)
        for mid, cols in mb.data.items():
            T_ = len(cols["loss_mask"]) // 32
            for row, (eps_id, agent_id) in enumerate(mb.structure[mid]):
                sa = next(e for e in eps if e.id_ == eps_id).agent_episodes[agent_id]
                _, want, _ = single_apply(single_state, EpisodeBatch.from_episodes([sa]), {},
                                          Context())
                n = len(sa)
                got = {c: np.asarray(v)[row * T_:row * T_ + n] for c, v in cols.items()}
                for c in ("obs", "new_obs", "actions", "rewards", "terminateds"):
                    np.testing.assert_array_equal(got[c], np.asarray(want[c])[:n])
                assert (got["agent_index"] == AGENTS.index(agent_id)).all()
    assert all(j._cache_size() <= 2 for j in learner.jitted.values())  # T buckets only


def test_env_to_module_rows_are_the_agents_to_act(fixture):
    eps = [ep for ep in episodes(fixture, 30) if not ep.is_done][:4]
    assert eps
    pipe = default_multi_agent_env_to_module(OBS, ACT, fixture["modules"], frame_stack(2),
                                             agent_ids=AGENTS)
    mb, _ = pipe.apply(pipe.init(), eps)
    seen = set()
    for mid, cols in mb.data.items():
        for row, (eps_id, agent_id) in enumerate(mb.structure[mid]):
            sa = next(e for e in eps if e.id_ == eps_id).agent_episodes[agent_id]
            last = np.asarray(sa.get_observations(-1))
            prev = np.asarray(sa.get_observations(-2, fill=0.0)) if len(sa) or \
                sa.len_lookback_buffer else np.zeros_like(last)
            np.testing.assert_array_equal(np.asarray(cols["obs"][row]),
                                          np.concatenate([prev, last]))
            seen.add((eps_id, agent_id))
    assert seen == {(ep.id_, a) for ep in eps for a in ep.get_agents_to_act()}


def test_env_to_module_filter_pushes_every_agent_that_stepped_as_rllib(fixture):
    eps = episodes(fixture, 20)
    assert any(ep.is_done for ep in eps) and any(not ep.is_done for ep in eps)
    pipe = default_multi_agent_env_to_module(OBS, ACT, fixture["modules"],
                                             mean_std_filter_per_agent(len(AGENTS)),
                                             agent_ids=AGENTS)
    mb, states = pipe.apply(pipe.init(), eps, rows=64)
    for mid in ("m0", "m1"):
        assert sorted(mb.structure[mid]) == sorted(
            (ep.id_, a) for ep in eps for a in ep.get_agents_to_act()
            if fixture["modules"][a] == mid)
        for k, a in enumerate(AGENTS):
            if fixture["modules"][a] != mid:
                continue
            stepped = [ep for ep in eps if a in ep.get_agents_that_stepped()]
            assert float(states[mid][0].count[k]) == len(stepped)  # done agents included
    per_module = default_multi_agent_env_to_module(OBS, ACT, fixture["modules"],
                                                   mean_std_filter(), agent_ids=AGENTS)
    _, states = per_module.apply(per_module.init(), eps, rows=64)  # 64 rows: padding pushes
    for mid in ("m0", "m1"):                                      # nothing
        assert float(states[mid][0].count) == sum(
            fixture["modules"][a] == mid for ep in eps for a in ep.get_agents_that_stepped())


def test_pipeline_errors_name_modules_and_spaces(fixture):
    other = dict(OBS, a1=gym.spaces.Box(-1, 1, (5,), np.float32))
    with pytest.raises(ModuleSpaceMismatchError, match="'a0' and 'a1'"):
        default_multi_agent_learner(other, ACT, fixture["modules"])
    with pytest.raises(ConfigError, match="per_module names modules"):
        default_multi_agent_learner(OBS, ACT, fixture["modules"], per_module={"m9": []})
    learner = default_multi_agent_learner({"a0": T.OBS_SPACE}, ACT, {"a0": "m0"})
    with pytest.raises(ConfigError, match="agent 'a1' of episode 'ep0' has no module"):
        learner.apply(learner.init(), episodes(fixture, 3))


def test_per_agent_filter_env_to_module_and_frozen_match_the_single_agent_filter():
    from rljax_offline.episode.episode import Episode

    box = gym.spaces.Box(-50, 50, (2,), np.float32)
    rng = np.random.default_rng(1)
    eps = [Episode(observations=rng.normal(k, 1.0 + k, size=(n + 1, 2)).astype(np.float32),
                   actions=np.zeros(n, np.int64), rewards=np.zeros(n), observation_space=box)
           for k, n in ((0, 3), (1, 4), (2, 2))]
    index = jnp.asarray([0, 1, 0])
    spaces = Spaces.of(box, gym.spaces.Discrete(2))
    per_agent = mean_std_filter_per_agent(2)
    state = per_agent.init(spaces)
    out, _, state = jax.jit(per_agent.apply)(state, EpisodeBatch.from_episodes(eps), {},
                                             Context(agent_index=index))
    single = mean_std_filter()
    for agent, rows in ((0, [0, 2]), (1, [1])):
        want, _, s = jax.jit(single.apply)(single.init(spaces),
                                  EpisodeBatch.from_episodes([eps[r] for r in rows]), {},
                                  Context())
        for j, r in enumerate(rows):
            n = len(eps[r])
            np.testing.assert_allclose(np.asarray(out.observations[r, n]),
                                       np.asarray(want.observations[j, n]), rtol=1e-5)
        assert float(state.count[agent]) == len(rows)
        np.testing.assert_allclose(np.asarray(state.mean[agent]), np.asarray(s.mean),
                                   rtol=1e-5)
    # frozen (evaluation): every row normalized with its own agent's statistics, none pushed
    frozen, _, same = jax.jit(per_agent.apply)(state, EpisodeBatch.from_episodes(eps), {},
                                               Context(agent_index=index, frozen=True))
    np.testing.assert_array_equal(np.asarray(same.count), np.asarray(state.count))
    for r, agent in enumerate((0, 1, 0)):
        std = np.sqrt(np.where(state.count[agent] > 1,
                               state.m2[agent] / np.maximum(state.count[agent] - 1, 1),
                               np.square(state.mean[agent])))
        want = np.clip((eps[r].observations - state.mean[agent]) / (std + 1e-6), -10, 10)
        np.testing.assert_allclose(np.asarray(frozen.observations[r, :len(eps[r]) + 1]),
                                   want, rtol=1e-5, atol=1e-6)
    static, _, _ = mean_std_filter_per_agent(2, update=False).apply(
        state, EpisodeBatch.from_episodes(eps), {}, Context(agent_index=index))
    np.testing.assert_allclose(np.asarray(static.observations), np.asarray(frozen.observations),
                               rtol=1e-6)


def test_per_agent_filter_equals_rllibs_multi_agent_mean_std_filter(fixture):
    """RLlib 2.60's env-to-module `MeanStdFilter(multi_agent=True)` called after every env
    step of 40 traces (`fixtures/multi_agent/make_rllib_filter_fixtures.py`): the agents to
    act get RLlib's normalized observations, and each agent's statistics end equal."""
    import json
    import os

    with open(os.path.join(T.HERE, "rllib_filter.json")) as f:
        rllib = json.load(f)
    pipe = default_multi_agent_env_to_module(OBS, ACT, fixture["modules"],
                                             mean_std_filter_per_agent(len(AGENTS)),
                                             agent_ids=AGENTS)
    state, compared = pipe.init(), 0
    for i, calls in zip(rllib["traces"], rllib["calls"]):
        tr = fixture["traces"][i]
        b = T.new_builder(fixture, i)
        b.add_env_reset(observations=tr["reset"]["observations"], infos=tr["reset"]["infos"])
        for k, want in enumerate(calls):
            if k:
                T.step(b, tr["steps"][k - 1])
            mb, state = pipe.apply(state, [b.finalize()])
            for mid, rows in mb.structure.items():
                for row, (_, agent) in enumerate(rows):
                    np.testing.assert_allclose(np.asarray(mb.data[mid]["obs"][row]),
                                               want[agent], rtol=1e-4, atol=1e-5)
                    compared += 1
    assert compared > 250
    for k, a in enumerate(AGENTS):
        stats = state[fixture["modules"][a]][0]
        want = rllib["stats"][a]
        assert float(stats.count[k]) == want["n"]
        np.testing.assert_allclose(np.asarray(stats.mean[k]), want["mean"], rtol=1e-5)
        np.testing.assert_allclose(np.asarray(stats.std[k]), want["std"], rtol=1e-4)
