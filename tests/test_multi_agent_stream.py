"""Multi-agent streaming with exact resume: from every cursor of two epochs (file order and
seeded order, several file pairs and row groups) the resumed stream gives exactly the
episodes that followed, bytes for bytes, without decoding the skipped ones; a cursor on other
data is refused by name; batches cut by `stream_batches` resume exactly too."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import rljax_offline.data.multi_agent_stream as S
from rljax_offline.acting.multi_agent_runner import MultiAgentEnvRunner, random_policy
from rljax_offline.data.multi_agent_format import agent_rows, env_record
from rljax_offline.data.multi_agent_io import write_multi_agent_episodes
from rljax_offline.data.stream import StreamCursor, stream_batches
from rljax_offline.envs.async_agents import AsyncAgentsEnv
from rljax_offline.errors import DataChangedError


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    lengths = iter([6, 8])  # the two env copies end at different steps
    runner = MultiAgentEnvRunner(
        lambda: AsyncAgentsEnv(max_steps=next(lengths)),
        {"m": random_policy(gym.spaces.Discrete(2))},
        agent_to_module_mapping_fn=lambda a, e: "m", num_envs=2, seed=1)
    folder = str(tmp_path_factory.mktemp("ma"))
    write_multi_agent_episodes(runner.sample(8), folder, max_episodes_per_file=3,
                               row_group_size=2)
    return folder


def key(ep):
    """Everything the format stores of an episode, as bytes."""
    rows = agent_rows(ep).to_pylist()
    rec = env_record(ep, ep.custom_data.get("global_state")).to_pylist()
    return json.dumps([rows, rec], default=lambda b: b.hex(), sort_keys=True)


@pytest.mark.parametrize("seed", [None, 3])
def test_resume_from_every_cursor_gives_the_same_episodes(dataset, seed, monkeypatch):
    full = list(S.stream_multi_agent_episodes(dataset, seed=seed, num_epochs=2))
    assert len(full) == 16
    ids = [ep.id_ for ep, _ in full]
    assert sorted(ids[:8]) == sorted(ids[8:]) and len(set(ids[:8])) == 8
    if seed is not None:
        assert ids[:8] != ids[8:]  # each epoch its own order
    want = [key(ep) for ep, _ in full]
    decoded = []
    real = S.episode_from_rows
    monkeypatch.setattr(S, "episode_from_rows",
                        lambda rows, *a, **k: decoded.append(1) or real(rows, *a, **k))
    for i, (_, cursor) in enumerate(full):
        decoded.clear()
        saved = S.MultiAgentStreamCursor.restored(json.loads(json.dumps(cursor.summary())))
        rest = list(S.stream_multi_agent_episodes(dataset, seed=seed, start=saved,
                                                  num_epochs=2))
        assert [key(ep) for ep, _ in rest] == want[i + 1:], i
        assert [c for _, c in rest] == [c for _, c in full[i + 1:]]
        if seed is None:  # file order: the skipped episodes are never decoded
            assert len(decoded) == 16 - i - 1


def test_a_cursor_on_other_data_is_refused(dataset, tmp_path):
    _, cursor = next(S.stream_multi_agent_episodes(dataset))
    other = str(tmp_path / "other")
    runner = MultiAgentEnvRunner(AsyncAgentsEnv, {"m": random_policy(gym.spaces.Discrete(2))},
                                 agent_to_module_mapping_fn=lambda a, e: "m")
    write_multi_agent_episodes(runner.sample(2), other)
    with pytest.raises(DataChangedError, match="not the one the cursor was made on"):
        next(S.stream_multi_agent_episodes(other, start=cursor))


def test_stream_batches_over_multi_agent_episodes_resume_exactly(dataset):
    read_epoch = S.multi_agent_read_epoch(dataset, seed=5)

    def to_rows(chunk, state):  # one row per agent step: (episode number, reward)
        rewards = [float(r) for ep in chunk for a in sorted(ep.agent_ids)
                   for r in np.asarray(ep.agent_episodes[a].get_rewards())]
        return {"r": np.asarray(rewards, np.float32)}, state + len(chunk)

    full = stream_batches(read_epoch, to_rows, 7, 2, StreamCursor(replay_state=0))
    first = [next(full) for _ in range(12)]
    for i in (0, 4, 9):
        resumed = stream_batches(read_epoch, to_rows, 7, 2, first[i][1])
        for j in range(i + 1, 12):
            batch, cursor = next(resumed)
            np.testing.assert_array_equal(batch["r"], first[j][0]["r"])
            assert cursor == first[j][1]
