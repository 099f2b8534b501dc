"""Offline data: RLlib-written fixtures, our files read by RLlib's decoder, tabular <-> episodes,
SampleBatch JSON, writing options and reading modes."""

import glob
import json

import msgpack
import msgpack_numpy
import numpy as np
import pyarrow.parquet as pq
import pytest

from rljax_offline import Episode
from rljax_offline.data import (
    EpisodeWriter,
    SkipReport,
    convert_dataset,
    inspect_dataset,
    iter_episodes,
    read_episodes,
    write_episodes,
)


@pytest.fixture(scope="module")
def fixture_episodes(rllib_fixtures):
    return read_episodes(rllib_fixtures / "episodes")


def make_episodes(n=6, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        T = int(rng.integers(3, 30))
        out.append(Episode(observations=rng.normal(size=(T + 1, 4)).astype(np.float32),
                           actions=rng.integers(0, 2, T).astype(np.int32),
                           rewards=np.ones(T), terminated=bool(i % 2), truncated=not i % 2,
                           extra_model_outputs={"action_logp": rng.normal(size=T).astype(
                               np.float32)}))
    return out


def test_fixture_episodes_read(fixture_episodes):
    eps = fixture_episodes
    assert len(eps) == 20 and sum(len(e) for e in eps) == 8808
    assert sum(e.is_terminated for e in eps) == 8 and sum(e.is_truncated for e in eps) == 12
    assert np.mean([len(e) for e in eps]) == pytest.approx(440.4)
    assert eps[0].observation_space.shape == (4,) and eps[0].action_space.n == 2


@pytest.mark.parametrize("folder", ["tabular", "tabular_uncompressed"])
def test_fixture_tabular_equals_fixture_episodes(rllib_fixtures, fixture_episodes, folder):
    tab = read_episodes(rllib_fixtures / folder, input_read_episodes=False)
    ids = (rllib_fixtures / "episode_ids_in_tabular.txt").read_text().split()
    assert [e.id_ for e in tab] == ids
    by_id = {e.id_: e for e in fixture_episodes}
    for ep in tab:
        ref = by_id[ep.id_]
        assert len(ep) == len(ref), "tabular rows must not lose the last step"
        np.testing.assert_array_equal(ep.observations, ref.observations)
        np.testing.assert_array_equal(ep.actions, ref.actions)
        np.testing.assert_array_equal(ep.rewards, ref.rewards)
        for k in ("action_dist_inputs", "action_logp", "weights_seq_no"):
            np.testing.assert_array_equal(ep.extra_model_outputs[k], ref.extra_model_outputs[k])
        assert (ep.is_terminated, ep.is_truncated) == (ref.is_terminated, ref.is_truncated)


@pytest.mark.parametrize("rllib_layout", [False, True])
def test_our_files_decode_with_rllibs_decoder(tmp_path, fixture_episodes, rllib_layout):
    files = write_episodes(fixture_episodes[:3], tmp_path, rllib_layout=rllib_layout)
    table = pq.read_table(files[0])
    assert table.schema.names == ["item"]
    meta = pq.read_schema(files[0]).metadata
    assert meta[b"rljax_offline.format_version"] == b"1"
    assert json.loads(meta[b"rljax_offline.observation_space"])["space"] == "box"
    for blob, ref in zip(table.column("item").to_pylist(), fixture_episodes):
        state = msgpack.unpackb(blob, object_hook=msgpack_numpy.decode)
        ref_state = ref.get_state(finalized=not rllib_layout)
        assert list(state) == list(ref_state)
        obs = state["observations"]["data"]
        if rllib_layout:
            assert isinstance(obs, list) and obs[0].dtype == np.float32 and obs[0].shape == (4,)
            assert type(state["actions"]["data"][0]) is np.int32
            assert type(state["rewards"]["data"][0]) is float
        else:
            assert obs.dtype == np.float32 and obs.shape == (len(ref) + 1, 4)
        assert state["t"] - state["t_started"] == len(ref)


def test_rllib_layout_bytes_match_fixture(rllib_fixtures, tmp_path, fixture_episodes):
    src = sorted(glob.glob(str(rllib_fixtures / "episodes" / "**" / "*.parquet"),
                           recursive=True))[0]
    original = pq.read_table(src).column("item")[0].as_py()
    files = write_episodes(read_episodes(src), tmp_path, rllib_layout=True)
    assert pq.read_table(files[0]).column("item")[0].as_py() == original


def test_chunks_with_lookback_round_trip_and_join(tmp_path):
    ep = make_episodes(1)[0].replace(terminated=False, truncated=False)
    first, second = ep[:10], ep.slice(slice(10, None), len_lookback_buffer=3)
    write_episodes([first, second], tmp_path)
    a, b = read_episodes(tmp_path)
    assert b.t_started == 10 and b.len_lookback_buffer == 3
    joined = a.concat_episode(b)
    np.testing.assert_array_equal(joined.get_observations(), ep.get_observations())


def test_max_rows_per_file_compression_and_atomic_names(tmp_path):
    eps = make_episodes(7)
    files = write_episodes(eps, tmp_path, output_max_rows_per_file=3, compression="snappy")
    assert len(files) == 3
    assert [pq.read_metadata(f).num_rows for f in files] == [3, 3, 1]
    assert pq.ParquetFile(files[0]).metadata.row_group(0).column(0).compression == "SNAPPY"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_killed_writer_leaves_no_partial_file(tmp_path):
    eps = make_episodes(5)
    with pytest.raises(RuntimeError, match="boom"):
        with EpisodeWriter(tmp_path, output_max_rows_per_file=2, row_group_size=1,
                           run_id="r1") as w:
            for i, ep in enumerate(eps):
                if i == 3:
                    raise RuntimeError("boom")
                w.write(ep)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["episodes_r1_000000.parquet"], names  # finished file kept, partial dropped
    assert len(read_episodes(tmp_path)) == 2


def test_tabular_write_read_and_compressed_columns(tmp_path):
    eps = make_episodes(5)
    write_episodes(eps, tmp_path / "plain", output_write_episodes=False)
    schema = pq.read_schema(next((tmp_path / "plain").glob("*.parquet")))
    assert str(schema.field("obs").type).startswith("fixed_size_list")
    assert schema.names == ["eps_id", "agent_id", "module_id", "obs", "actions", "rewards",
                            "new_obs", "terminateds", "truncateds", "action_logp"]
    assert str(schema.field("agent_id").type) == "null"
    write_episodes(eps, tmp_path / "lz4", output_write_episodes=False,
                   output_compress_columns=["obs", "new_obs"])
    assert str(pq.read_schema(next((tmp_path / "lz4").glob("*.parquet"))).field(
        "obs").type) == "string"
    for folder in ("plain", "lz4"):
        back = read_episodes(tmp_path / folder, input_read_episodes=False)
        assert [e.id_ for e in back] == [e.id_ for e in eps]
        for a, b in zip(back, eps):
            np.testing.assert_array_equal(a.observations, b.observations)
            assert (a.is_terminated, a.is_truncated) == (b.is_terminated, b.is_truncated)


def test_tabular_rows_interleaved_and_spread_over_files(tmp_path):
    import pyarrow as pa

    eps = make_episodes(3)
    table = write_and_table(eps)
    order = np.argsort(np.tile(np.arange(100), 3)[:table.num_rows], kind="stable")
    shuffled = table.take(pa.array(order))  # rows of the episodes interleaved, time order kept
    half = shuffled.num_rows // 2
    pq.write_table(shuffled.slice(0, half), tmp_path / "a_000.parquet")
    pq.write_table(shuffled.slice(half), tmp_path / "b_001.parquet")
    back = {e.id_: e for e in read_episodes(tmp_path, input_read_episodes=False)}
    for ep in eps:
        np.testing.assert_array_equal(back[ep.id_].observations, ep.observations)


def write_and_table(eps):
    from rljax_offline.data import episodes_to_table

    return episodes_to_table(eps)


def test_input_read_schema_and_legacy_done(tmp_path):
    import pyarrow as pa

    T = 4
    obs = np.arange(T + 1, dtype=np.float32)[:, None].repeat(2, 1)
    table = pa.table({
        "episode": ["e1"] * T, "o_t": [list(o) for o in obs[:-1]],
        "a_t": [0, 1, 0, 1], "r_t": [1.0] * T, "o_tp1": [list(o) for o in obs[1:]],
        "d_t": [False, False, False, True], "logprobs_t": [-0.1] * T})
    pq.write_table(table, tmp_path / "foreign.parquet")
    schema = {"eps_id": "episode", "obs": "o_t", "actions": "a_t", "rewards": "r_t",
              "new_obs": "o_tp1", "done": "d_t"}
    (ep,) = read_episodes(tmp_path, input_read_episodes=False, input_read_schema=schema)
    assert len(ep) == T and ep.is_terminated and not ep.is_truncated
    np.testing.assert_array_equal(ep.observations, obs)
    np.testing.assert_allclose(ep.extra_model_outputs["logprobs_t"], -0.1)


def test_sample_batch_json(tmp_path):
    path = tmp_path / "old.json"
    batches = [{"type": "SampleBatch", "obs": [[0.0, 1.0], [1.0, 2.0]],
                "new_obs": [[1.0, 2.0], [2.0, 3.0]], "actions": [0, 1], "rewards": [1.0, 1.0],
                "dones": [False, True], "eps_id": [7, 7], "action_logp": [-0.5, -0.6]}]
    path.write_text("\n".join(json.dumps(b) for b in batches))
    files = convert_dataset(str(path), str(tmp_path / "eps"), to="episodes")
    (ep,) = read_episodes(files)
    assert len(ep) == 2 and ep.is_terminated and ep.id_ == "7"
    np.testing.assert_array_equal(ep.get_observations(-1), [2.0, 3.0])


def test_convert_both_ways(tmp_path, rllib_fixtures):
    files = convert_dataset(str(rllib_fixtures / "tabular"), str(tmp_path / "eps"),
                            to="episodes")
    eps = read_episodes(files)
    back = convert_dataset(str(tmp_path / "eps"), str(tmp_path / "tab"), to="tabular")
    tab = read_episodes(back, input_read_episodes=False)
    assert [len(e) for e in tab] == [len(e) for e in eps]


def test_streaming_shuffle_prefetch_and_sharding(tmp_path):
    eps = make_episodes(12)
    write_episodes(eps, tmp_path, output_max_rows_per_file=2)
    ids = [e.id_ for e in eps]
    a = [e.id_ for e in iter_episodes(tmp_path, shuffle_buffer_size=4, seed=3)]
    b = [e.id_ for e in iter_episodes(tmp_path, shuffle_buffer_size=4, seed=3, prefetch=2)]
    assert a == b and sorted(a) == sorted(ids) and a != ids
    shards = [[e.id_ for e in iter_episodes(tmp_path, process_index=i, process_count=3)]
              for i in range(3)]
    assert sorted(sum(shards, [])) == sorted(ids) and all(len(s) == 4 for s in shards)
    assert [e.id_ for e in iter_episodes(str(tmp_path / "*.parquet"))] == ids
    assert [e.id_ for e in iter_episodes(f"file://{tmp_path}")] == ids


def test_inspect(rllib_fixtures):
    info = inspect_dataset(str(rllib_fixtures / "episodes"))
    assert info["episodes"] == 20 and info["timesteps"] == 8808
    assert info["episode_return_mean"] == pytest.approx(440.4)
    assert info["schema"] == {"item": "binary"} and info["obs_shape"] == [[4]]


def test_skip_bad_files_reports(tmp_path):
    write_episodes(make_episodes(2), tmp_path)
    (tmp_path / "zz_bad.parquet").write_bytes(b"not parquet at all")
    skipped = SkipReport()
    eps = read_episodes(tmp_path, on_bad_file="skip", skipped=skipped)
    assert len(eps) == 2 and len(skipped) == 1 and "zz_bad.parquet" in str(skipped)


def test_rllib_folder_layout(tmp_path):
    files = write_episodes(make_episodes(3), tmp_path, output_max_rows_per_file=2,
                           rllib_folders="CartPoleEnv", rllib_layout=True, run_id="r1")
    rel = [str(__import__("pathlib").Path(f).relative_to(tmp_path)) for f in files]
    assert rel == ["cartpoleenv/run-000001-00001/episodes_r1_000000-0.parquet",
                   "cartpoleenv/run-000001-00002/episodes_r1_000000-0.parquet"]
    assert len(read_episodes(tmp_path)) == 3


def test_sample_exactly_train_batch_size_timesteps(tmp_path):
    from rljax_offline.data import sample_timesteps

    eps = make_episodes(9, seed=4)
    write_episodes(eps, tmp_path)
    batches = list(sample_timesteps(iter_episodes(tmp_path), 32, input_read_batch_size=2,
                                    len_lookback_buffer=2))
    total = sum(len(e) for e in eps)
    assert len(batches) == total // 32
    assert all(sum(len(c) for c in b) == 32 for b in batches)
    # Chunks of one episode join back into it, in order, with lookback kept.
    chunks = {}
    for b in batches:
        for c in b:
            chunks.setdefault(c.id_, []).append(c)
    first = eps[0]
    joined = chunks[first.id_][0]
    for c in chunks[first.id_][1:]:
        assert c.len_lookback_buffer <= 2
        joined = joined.concat_episode(c)
    np.testing.assert_array_equal(joined.get_rewards(), first.get_rewards()[:len(joined)])


def test_sample_timesteps_keeps_every_timestep_once_and_the_short_rest_on_request():
    """`sample_timesteps` (a host view of `stream_batches`'s cutting): every timestep of the
    stream lands in exactly one chunk, in order; `drop_last=False` yields the short rest; an
    empty stream yields nothing."""
    from rljax_offline.data import sample_timesteps

    eps = make_episodes(7, seed=5)
    total = sum(len(e) for e in eps)
    batches = list(sample_timesteps(iter(eps), 10, input_read_batch_size=3, drop_last=False))
    assert [sum(len(c) for c in b) for b in batches] == [10] * (total // 10) + (
        [total % 10] if total % 10 else [])
    rewards = np.concatenate([c.get_rewards() for b in batches for c in b])
    np.testing.assert_array_equal(rewards, np.concatenate([e.get_rewards() for e in eps]))
    assert list(sample_timesteps(iter([]), 10)) == []


def test_prefetch_thread_ends_when_the_consumer_stops_early(tmp_path):
    """A consumer that stops with the prefetch queue full leaves no thread behind."""
    import threading
    import time

    write_episodes(make_episodes(12), tmp_path, output_max_rows_per_file=1)
    before = threading.active_count()
    stream = iter_episodes(tmp_path, prefetch=1)
    next(stream)
    time.sleep(0.3)  # the worker fills the queue and blocks on the next put
    stream.close()
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() == before
