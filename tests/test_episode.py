"""Episode: immutability, pytree/jit behaviour, nested spaces, chunks, setters and errors."""

import chex
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax_offline import Episode, EpisodeBuilder, EpisodeError


def make_episode(T=6, lookback=0, obs_dim=3, terminated=False, t_started=0, emo=True):
    rng = np.random.default_rng(T * 10 + lookback)
    n = T + lookback
    return Episode(
        observations=rng.normal(size=(n + 1, obs_dim)).astype(np.float32),
        actions=rng.integers(0, 2, size=n),
        rewards=rng.normal(size=n),
        extra_model_outputs={"action_logp": rng.normal(size=n).astype(np.float32)} if emo
        else None,
        terminated=terminated, len_lookback_buffer=lookback, t_started=t_started,
        observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
        action_space=gym.spaces.Discrete(2))


def test_basic_properties():
    ep = make_episode(T=6, lookback=2, t_started=10, terminated=True)
    assert len(ep) == 6
    assert ep.t == ep.env_t == 16
    assert ep.is_done and ep.is_terminated and not ep.is_truncated
    assert ep.get_return() == pytest.approx(float(np.sum(ep.rewards[2:])))
    assert ep.observation_space == gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    assert isinstance(ep.id_, str) and len(ep.id_) == 32
    assert len(ep.infos) == 9


def test_immutable_and_setters_return_new():
    ep = make_episode()
    with pytest.raises(AttributeError):
        ep.rewards = np.zeros(6)
    old = np.array(ep.rewards)
    new = ep.set_rewards(new_data=np.ones(6))
    np.testing.assert_array_equal(ep.rewards, old)
    np.testing.assert_array_equal(new.get_rewards(), np.ones(6))
    new = ep.set_rewards(new_data=5.0, at_indices=-1)
    assert new.get_rewards(-1) == 5.0 and ep.get_rewards(-1) != 5.0
    new = ep.set_actions(new_data=[7, 8], at_indices=[0, 2])
    np.testing.assert_array_equal(new.get_actions([0, 2]), [7, 8])
    new = ep.set_observations(new_data=np.zeros((2, 3)), at_indices=slice(1, 3))
    np.testing.assert_array_equal(new.get_observations(slice(1, 3)), np.zeros((2, 3)))
    new = ep.set_extra_model_outputs(key="action_logp", new_data=np.float32(3.0), at_indices=0)
    assert new.get_extra_model_outputs("action_logp", 0) == 3.0
    r = ep.replace(terminated=True)
    assert r.is_terminated and not ep.is_terminated
    with pytest.raises(IndexError, match="slice holds 2 items"):
        ep.set_rewards(new_data=np.ones(3), at_indices=slice(0, 2))
    with pytest.raises(IndexError):
        ep.set_rewards(new_data=1.0, at_indices=100)
    with pytest.raises(TypeError, match="unknown fields"):
        ep.replace(bogus=1)


def test_setters_into_lookback():
    ep = Episode(observations=np.arange(7.0), actions=np.arange(6), rewards=np.arange(6.0),
                 len_lookback_buffer=3)
    new = ep.set_rewards(new_data=99.0, at_indices=-1, neg_index_as_lookback=True)
    assert new.rewards[2] == 99.0
    new = ep.set_rewards(new_data=[97.0, 98.0, 99.0], at_indices=slice(-2, 1),
                         neg_index_as_lookback=True)
    np.testing.assert_array_equal(new.rewards[1:4], [97.0, 98.0, 99.0])


def test_pytree_jit_device_put():
    ep = make_episode(lookback=1)
    leaves, treedef = jax.tree_util.tree_flatten(ep)
    assert len(leaves) == 4
    hash(treedef)
    doubled = jax.tree_util.tree_map(lambda x: x * 2, ep)
    np.testing.assert_allclose(doubled.rewards, ep.rewards * 2)
    assert doubled.len_lookback_buffer == 1 and not doubled.has_host_data
    with pytest.raises(EpisodeError, match="with_host_data"):
        doubled.get_infos()
    restored = doubled.with_host_data(ep)
    assert restored.id_ == ep.id_ and restored.get_infos() == ep.get_infos()
    assert ep.to_numpy().id_ == ep.id_
    on_device = jax.device_put(ep)
    assert isinstance(on_device.rewards, jax.Array)
    assert on_device.get_return() == pytest.approx(ep.get_return(), rel=1e-6)

    @jax.jit
    def f(e):
        return e.get_return(), e.get_observations(slice(-3, None), fill=0.0), e.set_rewards(
            new_data=jnp.zeros(6))

    ret, obs, zeroed = f(ep)
    assert float(ret) == pytest.approx(ep.get_return(), rel=1e-5)
    np.testing.assert_allclose(obs, ep.get_observations(slice(-3, None)))
    assert float(zeroed.get_return()) == 0.0
    chex.assert_trees_all_close(jax.tree_util.tree_map(np.asarray, on_device), ep)


def test_pmap_accepts_stacked_episodes():
    eps = [make_episode(T=4) for _ in range(2)]
    eps = [e.replace(id_="same") for e in eps]
    stacked = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *eps)
    out = jax.pmap(lambda e: e.get_rewards().sum(), devices=jax.devices()[:2])(stacked)
    np.testing.assert_allclose(out, [e.get_return() for e in eps], rtol=1e-5)


def test_dict_and_tuple_spaces():
    obs_space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,)),
                                 "flag": gym.spaces.Discrete(3)})
    act_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (1,))))
    b = EpisodeBuilder(observation_space=obs_space, action_space=act_space)
    b.add_env_reset(observation={"pos": np.zeros(2, np.float32), "flag": 0})
    for t in range(4):
        b.add_env_step(observation={"pos": np.full(2, t + 1, np.float32), "flag": t % 3},
                       action=(t % 2, np.array([0.5 * t], np.float32)), reward=1.0)
    ep = b.finalize()
    o = ep.get_observations(-1)
    assert set(o) == {"pos", "flag"} and o["pos"].tolist() == [4.0, 4.0]
    filled = ep.get_observations(slice(-7, None), fill=0)
    assert filled["pos"].shape == (7, 2) and filled["flag"].shape == (7,)
    np.testing.assert_array_equal(filled["pos"][:2], 0)
    a = ep.get_actions([0, 1])
    assert isinstance(a, tuple) and a[1].shape == (2, 1)
    st = ep.get_state()
    back = Episode.from_state(st)
    chex.assert_trees_all_close(back.observations, ep.observations)
    assert isinstance(back.actions, tuple)
    back2 = Episode.from_state(ep.get_state(finalized=False))
    chex.assert_trees_all_close(back2.actions, ep.actions)
    with pytest.raises(EpisodeError, match="shape"):
        Episode(observations={"pos": np.zeros((2, 3)), "flag": np.zeros(2, int)},
                actions=[0], rewards=[0.0], observation_space=obs_space)


def test_cut_keeps_lookback_and_concat_joins():
    ep = make_episode(T=5, emo=True)
    chunk2 = ep.cut(len_lookback_buffer=2)
    assert len(chunk2) == 0 and chunk2.t_started == 5 and chunk2.id_ == ep.id_
    assert chunk2.len_lookback_buffer == 2
    np.testing.assert_array_equal(chunk2.get_actions(slice(-2, None)), ep.get_actions()[-2:])
    # Continue chunk 2 for three steps, then join.
    b = EpisodeBuilder(id_=ep.id_, t_started=5, len_lookback_buffer=2,
                       observations=list(chunk2.observations), actions=list(chunk2.actions),
                       rewards=list(chunk2.rewards),
                       extra_model_outputs={"action_logp": list(
                           chunk2.extra_model_outputs["action_logp"])})
    for t in range(3):
        b.add_env_step(np.full(3, t, np.float32), 1, 0.5, terminated=t == 2,
                       extra_model_outputs={"action_logp": np.float32(-0.1)})
    chunk2_full = b.finalize()
    joined = ep.concat_episode(chunk2_full)
    assert len(joined) == 8 and joined.is_terminated and joined.t == 8
    np.testing.assert_array_equal(joined.get_rewards()[-3:], [0.5] * 3)
    np.testing.assert_array_equal(joined.get_observations()[:6], ep.get_observations())
    assert len(joined.infos) == 9
    # Slicing and joining are inverse operations.
    first, second = joined[:3], joined[3:]
    again = first.concat_episode(second)
    chex.assert_trees_all_close(again.get_observations(), joined.get_observations())
    assert again.is_terminated


def test_concat_errors():
    ep = make_episode(T=4)
    with pytest.raises(EpisodeError, match="ids differ"):
        ep.concat_episode(make_episode(T=4))
    cont = ep.cut()
    with pytest.raises(EpisodeError, match="starts at t_started"):
        ep.concat_episode(cont.replace(t_started=7))
    with pytest.raises(EpisodeError, match="last observation"):
        ep.concat_episode(cont.set_observations(new_data=np.full((1, 3), 9.0, np.float32)))
    with pytest.raises(EpisodeError, match="done"):
        ep.replace(terminated=True).concat_episode(cont)
    with pytest.raises(EpisodeError, match="done"):
        ep.replace(truncated=True).cut()


def test_slice_done_flags_and_lookback():
    ep = make_episode(T=6, lookback=2, terminated=True)
    assert ep[2:6].is_terminated and not ep[2:5].is_terminated
    s = ep[1:3]
    assert s.len_lookback_buffer == 2 and s.t_started == 1
    s0 = ep.slice(slice(0, 2), len_lookback_buffer=5)
    assert s0.len_lookback_buffer == 2  # only two steps exist before step 0
    with pytest.raises(TypeError):
        ep[0]


@pytest.mark.parametrize("kwargs, match", [
    (dict(observations=np.zeros((3, 2)), actions=[0, 1, 0], rewards=[0, 0, 0]),
     "one longer than actions"),
    (dict(observations=np.zeros((3, 2)), actions=[0, 1], rewards=[0.0]), "rewards must be"),
    (dict(observations=np.zeros((3, 2)), actions=[0, 1], rewards=[0.0, 1.0],
          len_lookback_buffer=3), "longer than the data"),
    (dict(observations={"a": np.zeros((3, 2)), "b": np.zeros((2,))}, actions=[0, 1],
          rewards=[0.0, 1.0]), "ragged"),
    (dict(observations=[np.zeros(2), np.zeros(3), np.zeros(2)], actions=[0, 1],
          rewards=[0.0, 1.0]), "item 1 has shape"),
    (dict(observations=np.zeros((3, 2)), actions=[0, 1], rewards=[0.0, 1.0],
          extra_model_outputs={"logp": [0.0]}), r"extra_model_outputs\['logp'\]"),
    (dict(observations=np.zeros((3, 2)), actions=[0, 1], rewards=[0.0, 1.0], infos=[{}]),
     "one per observation"),
    (dict(observations=np.zeros((3, 2)), actions=[0, 1], rewards=[0.0, 1.0],
          len_lookback_buffer=-1), "len_lookback_buffer"),
    (dict(observations=np.zeros((3, 2)), actions=[0, 1], rewards=[0.0, 1.0],
          terminated="yes"), "terminated must be a bool"),
    (dict(observations=np.zeros((3, 2)), actions=[0, 1], rewards=[0.0, 1.0],
          observation_space=gym.spaces.Box(-1, 1, (4,))), r"shape \(2,\).*expects \(4,\)"),
])
def test_inconsistent_input_errors(kwargs, match):
    with pytest.raises(EpisodeError, match=match):
        Episode(**kwargs)


def test_getter_errors_name_the_field():
    ep = make_episode(T=3)
    with pytest.raises(IndexError, match="out of range for actions"):
        ep.get_actions(3)
    with pytest.raises(KeyError, match="no extra model output 'nope'"):
        ep.get_extra_model_outputs("nope")
    with pytest.raises(TypeError, match="indices for observations"):
        ep.get_observations(1.5)
    assert ep.get_actions(3, fill=-1) == -1
    assert ep.get_infos(10, fill={}) == {}


def test_builder_checks_the_call_order_and_validates_at_finalize():
    b = EpisodeBuilder()
    with pytest.raises(EpisodeError, match="add_env_reset"):
        b.add_env_step(0, 0, 0.0)
    b.add_env_reset(np.zeros(2))
    with pytest.raises(EpisodeError, match="already reset"):
        b.add_env_reset(np.zeros(2))
    b.add_env_step(np.ones(2), 1, 1.0, extra_model_outputs={"logp": -0.5})
    b.add_env_step(np.ones(2), 1, 1.0)
    with pytest.raises(EpisodeError, match="given at 1 of 2 steps"):
        b.finalize()
    b2 = EpisodeBuilder()
    b2.add_env_reset(np.zeros(2))
    b2.add_env_step(np.ones(2), 1, 1.0, terminated=True)
    with pytest.raises(EpisodeError, match="is done"):
        b2.add_env_step(np.ones(2), 1, 1.0)
    ep = b2.finalize()
    assert ep.is_terminated and len(ep) == 1
    w = b2.lookback_window(3)
    assert len(w) == 0 and w.len_lookback_buffer == 1 and w.t_started == 1


def test_one_compile_serves_episodes_with_any_ids_and_infos():
    """ids, infos and custom data are host data, not jit cache keys: 100 distinct episodes of
    the same shapes compile once."""
    traces = []

    @jax.jit
    def f(e):
        traces.append(1)
        return e.get_return(), e.set_rewards(new_data=jnp.ones(len(e)))

    base = make_episode(T=5)
    for i in range(100):
        ep = base.replace(id_=f"ep-{i}", infos=[{"i": i}] * (len(base) + 1),
                          custom_data={"i": i})
        ret, out = f(ep)
    assert len(traces) == 1
    assert not out.has_host_data and out.with_host_data(ep).id_ == "ep-99"
