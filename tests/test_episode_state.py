"""RLlib state dicts: every RLlib-written fixture episode decodes and re-encodes to an equal
state (keys in wire order, dtypes, shapes, Python vs numpy scalars)."""

import glob

import msgpack
import msgpack_numpy
import numpy as np
import pyarrow.parquet as pq
import pytest

from rljax_offline import Episode, space_from_dict

STATE_KEYS = ["id_", "agent_id", "module_id", "multi_agent_episode_id", "observations",
              "actions", "rewards", "infos", "extra_model_outputs", "is_terminated",
              "is_truncated", "t_started", "t", "_observation_space", "_action_space",
              "_start_time", "_last_step_time", "custom_data"]


def fixture_states(root):
    files = sorted(glob.glob(str(root / "episodes" / "**" / "*.parquet"), recursive=True))
    assert len(files) == 20
    for f in files:
        for blob in pq.read_table(f).column("item").to_pylist():
            yield msgpack.unpackb(blob, object_hook=msgpack_numpy.decode)


def assert_same(a, b, path="state"):
    """Equal values *and* equal types (np.int32 scalar vs int vs float matter on the wire)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), (path, list(a), list(b))
        for k in a:
            if k in ("low", "high") and path.endswith("space"):
                np.testing.assert_array_equal(space_from_dict(a).low, space_from_dict(b).low)
                continue
            assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), (path, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, path
        np.testing.assert_array_equal(a, b)
    else:
        assert type(a) is type(b), (path, type(a), type(b))
        assert a == b, (path, a, b)


def test_fixture_states_round_trip(rllib_fixtures):
    n = 0
    for state in fixture_states(rllib_fixtures):
        ep = Episode.from_state(state)
        assert list(state) == STATE_KEYS
        assert len(ep) == state["t"] - state["t_started"]
        assert ep.observations.dtype == np.float32 and ep.observations.shape == (len(ep) + 1, 4)
        assert ep.actions.dtype == np.int32
        assert ep.is_done and (ep.is_terminated != ep.is_truncated)
        assert ep.get_return() == pytest.approx(len(ep))
        assert_same(ep.get_state(finalized=False), state)
        # The finalized layout holds the same data as one array per buffer.
        fin = ep.get_state()
        assert fin["observations"]["finalized"] is True
        np.testing.assert_array_equal(fin["observations"]["data"],
                                      np.stack(state["observations"]["data"]))
        assert_same(Episode.from_state(fin).get_state(finalized=False), state)
        n += 1
    assert n == 20


def test_fixture_state_survives_msgpack_round_trip(rllib_fixtures):
    state = next(fixture_states(rllib_fixtures))
    ep = Episode.from_state(state)
    for finalized in (False, True):
        blob = msgpack.packb(ep.get_state(finalized=finalized), default=msgpack_numpy.encode)
        again = msgpack.unpackb(blob, object_hook=msgpack_numpy.decode)
        back = Episode.from_state(again)
        np.testing.assert_array_equal(back.observations, ep.observations)
        assert back.id_ == ep.id_ and back.is_terminated == ep.is_terminated
    # Non-finalized bytes are exactly RLlib's bytes.
    original = msgpack.packb(state, default=msgpack_numpy.encode)
    assert msgpack.packb(ep.get_state(finalized=False), default=msgpack_numpy.encode) == original


def test_continuation_chunk_state_layout():
    """The layout the fixture README shows for `cut(len_lookback_buffer=2)` after 5 steps."""
    obs = [np.full(4, i, np.float32) for i in range(6)]
    ep = Episode(observations=obs, actions=[np.int32(a) for a in [0, 1, 0, 1, 0]],
                 rewards=[1.0] * 5)
    chunk2 = ep.cut(len_lookback_buffer=2)
    st = chunk2.get_state(finalized=False)
    assert st["t_started"] == 5 and st["t"] == 5
    assert st["observations"]["lookback"] == 2 and len(st["observations"]["data"]) == 3
    assert st["actions"]["lookback"] == 2 and [int(a) for a in st["actions"]["data"]] == [1, 0]


@pytest.mark.parametrize("bad, match", [
    ({"id_": "x"}, "missing keys"),
    ("not a dict", "must be a dict"),
])
def test_bad_states(bad, match):
    from rljax_offline import EpisodeError
    with pytest.raises(EpisodeError, match=match):
        Episode.from_state(bad)


def test_inconsistent_t_in_state(rllib_fixtures):
    from rljax_offline import EpisodeError
    state = next(fixture_states(rllib_fixtures))
    state["t"] += 1
    with pytest.raises(EpisodeError, match="inconsistent"):
        Episode.from_state(state)
