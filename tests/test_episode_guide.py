"""Every code example of RLlib's Episodes guide (shared/reference/rllib-docs/episodes.txt).

Adapted only where immutability demands it: the non-finalized episode is an `EpisodeBuilder`,
`finalize()` returns the finalized `Episode`, and lists come back as numpy arrays.
"""

import numpy as np
import pytest

from rljax_offline import Episode, EpisodeBuilder


def check(got, expected):
    if isinstance(expected, list):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
    else:
        assert got == expected, (got, expected)


@pytest.fixture()
def guide_episode():
    episode = EpisodeBuilder()
    assert len(episode) == 0
    episode.add_env_reset(observation="obs_0", infos="info_0")
    assert len(episode) == 0
    for i in range(5):
        episode.add_env_step(
            observation=f"obs_{i+1}",
            action=f"act_{i}",
            reward=f"rew_{i}",
            terminated=False,
            truncated=False,
            infos=f"info_{i+1}",
        )
    assert len(episode) == 5
    return episode


def test_creating_and_getters(guide_episode):
    builder = guide_episode
    # The getters work on the episode under construction ...
    check(builder.get_observations(0), "obs_0")
    check(builder.get_observations([1, 2]), ["obs_1", "obs_2"])
    check(builder.get_observations(slice(1, 3)), ["obs_1", "obs_2"])
    check(builder.get_rewards(-1), "rew_4")
    check(builder.get_actions(0), "act_0")
    # ... and on the finalized one, with the raw arrays as well.
    episode = builder.finalize()
    check(episode.get_observations(0), "obs_0")
    check(episode.observations[0], "obs_0")
    check(episode.get_observations([1, 2]), ["obs_1", "obs_2"])
    check(episode.get_observations(slice(1, 3)), ["obs_1", "obs_2"])
    check(episode.get_rewards(-1), "rew_4")
    check(episode.rewards[-1], "rew_4")
    check(episode.get_actions(0), "act_0")
    check(episode.actions[0], "act_0")
    check(episode.get_infos(0), "info_0")

    sliced_episode = episode[3:4]
    check(list(sliced_episode.observations), ["obs_3", "obs_4"])
    check(list(sliced_episode.actions), ["act_3"])
    check(list(sliced_episode.rewards), ["rew_3"])


def test_finalized_and_non_finalized(guide_episode):
    assert not hasattr(guide_episode, "is_finalized") or not guide_episode.is_finalized
    episode = guide_episode.finalize()
    assert episode.is_finalized is True
    assert isinstance(episode.observations, np.ndarray)


def test_complex_observations_finalize_to_struct_of_arrays():
    b = EpisodeBuilder()
    b.add_env_reset(observation={"a": np.zeros(2, np.float32), "b": 0})
    for t in range(1, 3):
        b.add_env_step(observation={"a": np.full(2, t, np.float32), "b": t}, action=t, reward=1.0)
    ep = b.finalize()
    assert ep.observations["a"].shape == (3, 2)
    assert ep.observations["b"].shape == (3,)


def test_cut_and_lookback(guide_episode):
    episode = guide_episode.finalize()
    assert len(episode) == 5
    assert episode.is_done is False
    continuation_episode = episode.cut()
    assert len(episode) == 5
    assert len(continuation_episode) == 0
    check(continuation_episode.get_observations(-1), "obs_5")
    # The builder cuts the same way.
    assert guide_episode.cut().get_observations(-1) == "obs_5"
    # With a lookback horizon of 1: the most recent action, reward and two observations.
    cont1 = episode.cut(len_lookback_buffer=1)
    check(cont1.get_actions(-1), "act_4")
    check(cont1.get_rewards(-1), "rew_4")
    check(cont1.get_observations([-2, -1]), ["obs_4", "obs_5"])


def test_lookback_buffers_and_fill():
    episode = Episode(
        observations=["o0", "o1", "o2", "o3"],
        actions=["a0", "a1", "a2"],
        rewards=[0.0, 1.0, 2.0],
        len_lookback_buffer=3,
    )
    assert len(episode) == 0
    with pytest.raises(IndexError):
        episode.get_rewards(0)
    check(episode.get_rewards(slice(-3, None)), [0.0, 1.0, 2.0])
    last_5_rewards = episode.get_rewards(slice(-5, None), fill=0.0)
    check(last_5_rewards, [0.0, 0.0, 0.0, 1.0, 2.0])


def test_neg_index_as_lookback():
    episode = Episode(
        observations=["o-3", "o-2", "o-1", "o0", "o1", "o2", "o3"],
        actions=["a-3", "a-2", "a-1", "a0", "a1", "a2"],
        rewards=[-3.0, -2.0, -1.0, 0.0, 1.0, 2.0],
        len_lookback_buffer=3,
    )
    assert len(episode) == 3
    expected = [[-2.0, -1.0, 0.0], [-1.0, 0.0, 1.0], [0.0, 1.0, 2.0]]
    for global_ts in [0, 1, 2]:
        rewards = episode.get_rewards(slice(global_ts - 2, global_ts + 1),
                                      neg_index_as_lookback=True)
        check(rewards, expected[global_ts])
