"""Streamed data resumes exactly: a stream restarted from the `StreamCursor` of any batch gives
the very batches that followed it (leftover rows and connector state included, over epoch
ends); a reader started at episode k of a shuffled order gives that order's tail; every
offline algorithm saved mid-stream and restored trains on bit-identical to an uninterrupted
run, with a mean-std filter in the learner pipeline (the default run: `DEFAULT_RUN_CASES`'s
Discrete one; CI: all). (SIGKILL of a streaming `run_training`:
tests/test_faults_resume.py.)"""

import json
import os
import shutil

import jax
import numpy as np
import pytest
from fault_testlib import cartpole_episodes
from learner_testlib import OFFLINE_ALGORITHM_CASES, case_ids, max_diff, with_slow_marks

from rljax_offline import Algorithm
from rljax_offline.connectors import mean_std_filter
from rljax_offline.data import iter_episodes, write_episodes
from rljax_offline.data.stream import DataChangedError, StreamCursor, stream_batches
from rljax_offline.learning import checkpoint as ckpt

# ---------------------------------------------------------------------- the cursor itself

_EPISODE_LENGTHS = [5, 1, 7, 3, 4, 9, 2]  # 31 rows an epoch: batches cut across chunks


def _read_epoch(lengths):
    def read(epoch, position):
        order = np.random.default_rng(epoch).permutation(len(lengths))
        return iter([(epoch, int(i), lengths[i]) for i in order[position:]])
    return read


def _to_rows(chunk, total):
    """Rows numbered by (epoch, episode, step), scaled by a running row count (a 'filter'
    whose state changes with every chunk)."""
    rows = [[e, i, t] for e, i, n in chunk for t in range(n)]
    total = total + len(rows)
    return {"x": np.asarray(rows, np.float32).reshape(-1, 3) / np.float32(total)}, total


def _take(stream, n):
    return [next(stream) for _ in range(n)]


@pytest.mark.parametrize("batch_size,chunk_size", [(4, 2), (6, 3), (13, 7), (20, 2)])
def test_resuming_from_any_cursor_gives_the_same_batches(batch_size, chunk_size):
    read = _read_epoch(_EPISODE_LENGTHS)
    straight = _take(stream_batches(read, _to_rows, batch_size, chunk_size,
                                    StreamCursor(replay_state=0)), 12)
    epochs = {int(c.epoch) for _, c in straight}
    assert len(epochs) > 1  # the runs cross epoch ends
    assert any(c.skip_rows for _, c in straight)  # and leave rows waiting
    for k, (_, cursor) in enumerate(straight[:-1]):
        resumed = _take(stream_batches(read, _to_rows, batch_size, chunk_size, cursor),
                        len(straight) - k - 1)
        for (want, want_cursor), (got, got_cursor) in zip(straight[k + 1:], resumed):
            np.testing.assert_array_equal(got["x"], want["x"])
            assert got_cursor.connector_state == want_cursor.connector_state
            assert got_cursor.summary() == want_cursor.summary()


def test_a_cursor_on_other_data_is_a_named_error():
    read = _read_epoch(_EPISODE_LENGTHS)
    cursor = StreamCursor(epoch=0, position=0, skip_rows=200, replay_state=0)
    with pytest.raises(DataChangedError, match="data changed"):
        next(stream_batches(read, _to_rows, 4, 2, cursor))
    with pytest.raises(ValueError, match="no episodes"):
        next(stream_batches(_read_epoch([]), _to_rows, 4, 2, StreamCursor(replay_state=0)))


@pytest.mark.parametrize("shuffle", [0, 3, 40])
def test_reader_started_at_k_gives_the_tail_of_the_same_order(tmp_path, shuffle):
    write_episodes(cartpole_episodes(23, seed=2), str(tmp_path), output_max_rows_per_file=7,
                   row_group_size=3)
    ids = [ep.id_ for ep in iter_episodes(str(tmp_path), shuffle_buffer_size=shuffle, seed=5)]
    written = [f"ep2-{i}" for i in range(23)]
    assert sorted(ids) == sorted(written) and (ids != written) == bool(shuffle)
    for k in (0, 1, 3, 4, 9, 19, 21, 22, 23, 30):
        tail = [ep.id_ for ep in iter_episodes(str(tmp_path), shuffle_buffer_size=shuffle,
                                               seed=5, start=k, prefetch=2)]
        assert tail == ids[k:]


def test_resumed_episode_rows_decode_only_what_the_order_still_yields(tmp_path, monkeypatch):
    """Episode-rows files skip without decoding: starting at episode 90 of 100 through a
    shuffle buffer of 4 decodes the 4 buffered episodes and the 6 still unread, not 90."""
    from rljax_offline.data import reader

    write_episodes(cartpole_episodes(100, seed=3, length=4), str(tmp_path),
                   output_max_rows_per_file=10, row_group_size=2)
    calls = []
    decode = reader.decode_episode
    monkeypatch.setattr(reader, "decode_episode", lambda *a, **k: calls.append(1) or decode(
        *a, **k))
    ids = [ep.id_ for ep in iter_episodes(str(tmp_path), shuffle_buffer_size=4, seed=1)]
    calls.clear()
    tail = [ep.id_ for ep in iter_episodes(str(tmp_path), shuffle_buffer_size=4, seed=1,
                                           start=90)]
    assert tail == ids[90:] and len(calls) == 10


# ---------------------------------------------------------------------- every algorithm


@pytest.fixture(scope="module")
def stream_data(tmp_path_factory):
    """CartPole-shaped episodes of 15..30 steps in several files: no batch size divides an
    epoch's rows."""
    path = str(tmp_path_factory.mktemp("stream"))
    write_episodes(cartpole_episodes(10, seed=4), path, output_max_rows_per_file=3)
    return path


def _streaming(base, data):
    return (base.environment("CartPole-v1")
            .offline_data(input_=data, materialize_data=False, materialize_mapped_data=False,
                          shuffle_buffer_size=4, input_read_batch_size=3, prefetch_batches=2,
                          sample_unit="timesteps")  # a transformer's windows: materialized
            .training(num_updates_per_iteration=3, train_batch_size_per_learner=40,
                      learner_connector=lambda spaces: [
                          mean_std_filter(as_learner_connector=True)])
            .learners(num_devices=1).evaluation(evaluation_interval=0).debugging(seed=7))


DISCRETE_CASES = [c for c in OFFLINE_ALGORITHM_CASES if c[0].endswith("discrete")]


@pytest.mark.parametrize("case", with_slow_marks(DISCRETE_CASES), ids=case_ids(DISCRETE_CASES))
def test_save_mid_stream_and_restore_is_exact_for_every_algorithm(case, stream_data, tmp_path):
    """Two iterations (past the first epoch end, rows waiting in the leftover buffer), save,
    restore into a new algorithm, two more: bit-identical to four straight, the filter
    included (restored, not refit)."""
    cfg = _streaming(case[1], stream_data)
    straight = cfg.build()
    want = [straight.train()["learners"]["default_policy"] for _ in range(2)]
    straight.save(str(tmp_path / "ckpt"))  # then runs on: the saved cursor is not the producer's
    want += [straight.train()["learners"]["default_policy"] for _ in range(2)]
    meta = ckpt.load_meta(str(tmp_path / "ckpt"))
    (saved,) = meta["stream"]["processes"]
    assert saved["batches"] == 6 and saved["epoch"] >= 1
    resumed = Algorithm.from_checkpoint(str(tmp_path / "ckpt"), cfg)
    got = [resumed.train()["learners"]["default_policy"] for _ in range(2)]
    assert got == want[2:]
    assert max_diff(straight.state, resumed.state) == 0.0
    count = lambda algo: float(jax.device_get(algo.state.connector_state[0][0].count))  # noqa: E731
    assert count(resumed) == count(straight) > 0
    straight.stop()
    resumed.stop()


def test_restore_in_place_rewinds_a_running_stream_stop_keeps_it_settings_are_checked(stream_data,
                                                                          tmp_path):
    from rljax_offline.algorithms.bc import BCConfig

    cfg = _streaming(BCConfig().rl_module(model_config={"fcnet_hiddens": [8]}), stream_data)
    algo = cfg.build()
    algo.train()
    algo.save(str(tmp_path / "c"))
    after_one = algo.train()["learners"]["default_policy"]
    algo.restore(str(tmp_path / "c"))  # the stream ran on: restore takes it back
    assert algo.train()["learners"]["default_policy"] == after_one
    algo.stop()  # keeps the cursor: training goes on from the last batch consumed
    third = algo.train()["learners"]["default_policy"]
    again = Algorithm.from_checkpoint(str(tmp_path / "c"), cfg)
    again.train()
    assert again.train()["learners"]["default_policy"] == third
    again.stop()
    other = _streaming(BCConfig().rl_module(model_config={"fcnet_hiddens": [8]}),
                       stream_data).offline_data(input_read_batch_size=5).build()
    with pytest.raises(ValueError, match="chunk_size"):
        other.restore(str(tmp_path / "c"))
    gen = sorted(n for n in os.listdir(tmp_path / "c") if n.startswith("gen-"))[-1]
    manifest = json.load(open(tmp_path / "c" / gen / ckpt.MANIFEST_FILE))
    assert "stream.msgpack" in manifest["files"]  # checksummed like the state
    shutil.copytree(tmp_path / "c", tmp_path / "lost")
    (tmp_path / "lost" / gen / "stream.msgpack").unlink()
    with pytest.raises(ckpt.CheckpointError, match="names a stream cursor but "
                                                   "stream.msgpack is missing"):
        algo.restore(str(tmp_path / "lost"))
    algo.stop()
