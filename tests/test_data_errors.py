"""Bad input gets a clear error naming file, row and column; unsafe payloads never run."""

import base64
import os
import pickle

import gymnasium as gym
import msgpack
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rljax_offline import Episode
from rljax_offline.data import OfflineDataError, read_episodes, write_episodes
from rljax_offline.data.codec import encode_state


def small_episode(T=5):
    return Episode(observations=np.zeros((T + 1, 4), np.float32), actions=np.zeros(T, np.int32),
                   rewards=np.ones(T), terminated=True)


def write_blob(tmp_path, blob, name="x.parquet"):
    pq.write_table(pa.table({"item": pa.array([blob], pa.binary())}), tmp_path / name)
    return tmp_path / name


def test_missing_file_and_empty_glob(tmp_path):
    with pytest.raises(OfflineDataError, match="does not exist"):
        read_episodes(tmp_path / "nope.parquet")
    with pytest.raises(OfflineDataError, match="matches no file"):
        read_episodes(str(tmp_path / "*.parquet"))
    with pytest.raises(OfflineDataError, match="holds no .parquet files"):
        read_episodes(tmp_path)


def test_truncated_and_not_parquet(tmp_path):
    (f,) = write_episodes([small_episode()], tmp_path / "d")
    data = open(f, "rb").read()
    bad = tmp_path / "trunc.parquet"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(OfflineDataError, match=r"trunc.parquet.*not a readable Parquet"):
        read_episodes(bad)
    junk = tmp_path / "junk.parquet"
    junk.write_text("hello")
    with pytest.raises(OfflineDataError, match="junk.parquet"):
        read_episodes(junk)


def test_missing_column_and_wrong_dtype(tmp_path):
    pq.write_table(pa.table({"other": [1, 2]}), tmp_path / "a.parquet")
    with pytest.raises(OfflineDataError, match=r"column 'item'.*has columns \['other'\]"):
        read_episodes(tmp_path / "a.parquet")
    pq.write_table(pa.table({"item": [1, 2]}), tmp_path / "b.parquet")
    with pytest.raises(OfflineDataError, match=r"column 'item'.*must be binary"):
        read_episodes(tmp_path / "b.parquet")


def test_tabular_schema_errors(tmp_path):
    pq.write_table(pa.table({"eps_id": ["a"], "obs": [[0.0]], "actions": [0]}),
                   tmp_path / "t.parquet")
    with pytest.raises(OfflineDataError, match="missing column 'rewards'"):
        read_episodes(tmp_path, input_read_episodes=False)
    with pytest.raises(OfflineDataError, match=r"column 'r_t'.*maps 'rewards' to 'r_t'"):
        read_episodes(tmp_path, input_read_episodes=False, input_read_schema={"rewards": "r_t"})
    pq.write_table(pa.table({"eps_id": ["a"], "obs": [[0.0]], "actions": [0], "rewards": [1.0],
                             "terminateds": [1]}), tmp_path / "t.parquet")
    with pytest.raises(OfflineDataError, match=r"column 'terminateds'.*must be bool"):
        read_episodes(tmp_path, input_read_episodes=False)


def test_gap_in_episode_rows(tmp_path):
    pq.write_table(pa.table({
        "eps_id": ["a"] * 3, "obs": [[0.0], [1.0], [3.0]], "actions": [0, 0, 0],
        "rewards": [1.0] * 3, "new_obs": [[1.0], [2.0], [4.0]],
        "terminateds": [False, False, True]}), tmp_path / "g.parquet")
    with pytest.raises(OfflineDataError, match=r"g.parquet.*gap.*step 1"):
        read_episodes(tmp_path, input_read_episodes=False)


def test_obs_shape_must_match_space(tmp_path):
    write_episodes([small_episode()], tmp_path)
    with pytest.raises(OfflineDataError, match=r"row 0.*column 'obs'.*shape \(4,\).*\(3,\)"):
        read_episodes(tmp_path, observation_space=gym.spaces.Box(-1, 1, (3,)))


def test_not_msgpack_and_not_an_episode(tmp_path):
    write_blob(tmp_path, b"\xc1garbage")
    with pytest.raises(OfflineDataError, match=r"x.parquet.*row 0.*not valid msgpack"):
        read_episodes(tmp_path)
    write_blob(tmp_path, msgpack.packb({"id_": "a"}))
    with pytest.raises(OfflineDataError, match=r"row 0.*not a valid episode state"):
        read_episodes(tmp_path)


class Boom:
    def __reduce__(self):
        return (os.system, ("touch /tmp/rljax_offline_pwned",))


def test_object_array_payload_is_refused_and_never_runs(tmp_path):
    if os.path.exists("/tmp/rljax_offline_pwned"):
        os.remove("/tmp/rljax_offline_pwned")
    state = small_episode().get_state()
    state["observations"]["data"] = {b"nd": True, b"type": "|O", b"kind": b"O",
                                     b"shape": [1], b"data": pickle.dumps(Boom())}
    write_blob(tmp_path, encode_state(state))
    with pytest.raises(OfflineDataError, match=r"x.parquet.*row 0.*kind b'O' is refused"):
        read_episodes(tmp_path)
    assert not os.path.exists("/tmp/rljax_offline_pwned")


@pytest.mark.parametrize("shape, data, match", [
    ([4], b"\x00" * 15, "needs 16 bytes but the payload has 15"),
    ([1 << 20, 1 << 20], b"", "would need"),
])
def test_shape_byte_mismatch_refused_before_allocating(tmp_path, shape, data, match):
    state = small_episode().get_state()
    state["rewards"]["data"] = {b"nd": True, b"type": "<f4", b"kind": b"", b"shape": shape,
                                b"data": data}
    write_blob(tmp_path, encode_state(state))
    with pytest.raises(OfflineDataError, match=match):
        read_episodes(tmp_path)


def test_encoder_refuses_object_arrays():
    with pytest.raises(TypeError, match="object"):
        encode_state({"x": np.array([object()], dtype=object)})


def test_malicious_pickle_in_compressed_column_is_refused(tmp_path):
    import lz4.frame

    if os.path.exists("/tmp/rljax_offline_pwned"):
        os.remove("/tmp/rljax_offline_pwned")
    evil = base64.b64encode(lz4.frame.compress(pickle.dumps(Boom()))).decode()
    pq.write_table(pa.table({"eps_id": ["a"], "obs": [evil], "actions": [0], "rewards": [1.0],
                             "new_obs": [evil], "terminateds": [True]}), tmp_path / "e.parquet")
    with pytest.raises(OfflineDataError,
                       match=r"e.parquet.*row 0.*column 'obs'.*global posix.system"):
        read_episodes(tmp_path, input_read_episodes=False)
    assert not os.path.exists("/tmp/rljax_offline_pwned")


def test_space_dict_bounds_are_loaded_without_pickle():
    from rljax_offline import SpaceError, space_from_dict

    evil = base64.b64encode(__import__("zlib").compress(pickle.dumps(Boom()))).decode()
    with pytest.raises(SpaceError, match="object arrays are refused"):
        space_from_dict({"space": "box", "low": evil, "high": evil, "shape": [1],
                         "dtype": "<f4"})


def test_on_bad_file_option_is_checked(tmp_path):
    write_episodes([small_episode()], tmp_path)
    with pytest.raises(ValueError, match="on_bad_file"):
        read_episodes(tmp_path, on_bad_file="ignore")


def test_encode_state_round_trip_of_numpy_scalars():
    from rljax_offline.data.codec import decode_state

    st = decode_state(encode_state({"a": np.float32(1.5), "b": np.bool_(True), "c": 2.0}))
    assert type(st["a"]) is np.float32 and type(st["b"]) is np.bool_ and st["c"] == 2.0
