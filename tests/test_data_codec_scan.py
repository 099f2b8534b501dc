"""The vectorised decoder of RLlib's per-step buffers gives the general decoder's result, and
refuses what the general decoder refuses."""

import glob
import pickle

import msgpack
import numpy as np
import pyarrow.parquet as pq
import pytest

from rljax_offline import Episode
from rljax_offline.data import OfflineDataError, codec
from rljax_offline.data.msgpack_scan import decode_with_scan


def fixture_blobs(rllib_fixtures, n=5):
    files = sorted(glob.glob(str(rllib_fixtures / "episodes" / "**" / "*.parquet"),
                             recursive=True))[:n]
    return [pq.read_table(f).column("item")[0].as_py() for f in files]


def general(blob):
    return codec._decode_tree(msgpack.unpackb(blob, raw=False, strict_map_key=False), True)


def scan(blob):
    return decode_with_scan(blob, codec._check_map, codec._decode_tree)


def test_scan_equals_general_decoder_on_rllib_rows(rllib_fixtures):
    for blob in fixture_blobs(rllib_fixtures):
        a, b = scan(blob), general(blob)
        assert a is not None and list(a) == list(b)
        buffers = [("observations",), ("actions",), ("rewards",)] + [
            ("extra_model_outputs", k) for k in b["extra_model_outputs"]]
        for path in buffers:
            x, y = a, b
            for p in path:
                x, y = x[p], y[p]
            xa, ya = np.asarray(x["data"]), np.asarray(y["data"])
            assert xa.dtype == ya.dtype and xa.shape == ya.shape
            np.testing.assert_array_equal(xa, ya)
        assert a["infos"] == b["infos"] and a["_observation_space"] == b["_observation_space"]


def test_finalized_rows_skip_the_scan():
    ep = Episode(observations=np.zeros((4, 2), np.float32), actions=np.zeros(3, np.int32),
                 rewards=np.ones(3), terminated=True)
    assert scan(codec.encode_episode(ep, finalized=True)) is None
    assert scan(codec.encode_episode(ep, finalized=False)) is not None


def per_step_state(T=6):
    ep = Episode(observations=np.arange((T + 1) * 2, dtype=np.float32).reshape(T + 1, 2),
                 actions=np.zeros(T, np.int32), rewards=np.ones(T), terminated=True)
    return ep.get_state(finalized=False)


@pytest.mark.parametrize("where", [0, 3])
def test_object_item_in_per_step_list_is_refused(where):
    state = per_step_state()
    blob_item = {b"nd": True, b"type": "|O", b"kind": b"O", b"shape": [2],
                 b"data": pickle.dumps([1, 2])}
    state["observations"]["data"][where] = blob_item
    with pytest.raises(OfflineDataError, match=r"row 2.*kind b'O' is refused"):
        codec.decode_episode(codec.encode_state(state), file="f.parquet", row=2)


def test_planted_ext_value_never_picks_up_decoded_arrays():
    state = per_step_state()
    state["custom_data"] = {"x": msgpack.ExtType(117, b"\x00" * 12)}
    blob = msgpack.packb(state, default=codec._np_default, use_bin_type=True)
    assert scan(blob) is None  # planted ext: the general decoder takes over
    assert isinstance(general(blob)["custom_data"]["x"], msgpack.ExtType)


def test_truncated_per_step_list_is_an_error():
    blob = codec.encode_state(per_step_state())
    with pytest.raises(OfflineDataError, match="row 0"):
        codec.decode_episode(blob[: len(blob) // 2], file="f.parquet", row=0)


def test_payload_length_mismatch_in_later_item_is_refused():
    state = per_step_state()
    state["observations"]["data"][4] = {b"nd": True, b"type": "<f4", b"kind": b"",
                                        b"shape": [2], b"data": b"\x00" * 7}
    with pytest.raises(OfflineDataError, match="need 8 bytes each, but the payloads differ"):
        codec.decode_episode(codec.encode_state(state))


def test_finalized_rows_skip_the_scan_even_with_per_step_infos(rllib_fixtures):
    """Our layout keeps `infos` a per-step list (of empty maps) beside one array a buffer: no
    scan is tried (it would walk the whole row to find no list), and the row decodes."""
    from rljax_offline.data.msgpack_scan import _PER_STEP_LIST

    rllib_blob = fixture_blobs(rllib_fixtures, n=1)[0]
    assert _PER_STEP_LIST.search(rllib_blob) is not None
    ep = Episode(observations=np.zeros((4, 3), np.float32), actions=np.arange(3),
                 rewards=np.ones(3, np.float32))
    ours = codec.encode_episode(ep)
    assert b"\xa9finalized\xc2" in ours  # the infos buffer stays a list
    assert _PER_STEP_LIST.search(ours) is None and scan(ours) is None
    np.testing.assert_array_equal(codec.decode_episode(ours).get_observations(),
                                  ep.get_observations())
