"""Device-resident data: rows sharded over the devices, sampled on the device, and the
streaming prefetch thread.

* the reduce-scatter gather returns exactly the rows asked for (floats, ints, bools, uint8);
* one sampler serves timesteps (uniform with replacement) and episodes (whole stretches);
* a transformer's windows end at any step, never cross an episode and are right-padded;
* the scan over 8 devices equals 1 device for episode and window sampling, under shard_map
  and pmap, and for the block layout of a multi-process run (simulated here on one process);
* the prefetch thread ends on exhaustion, on close, on an error and when abandoned.

Equivalence is checked in float64 (see test_learner_core.py for the tolerance)."""

import gc
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.sharding import PartitionSpec as P
from learner_testlib import (
    BOX,
    CASE_TRAINING,
    case_named,
    max_diff,
    random_columns,
    spec_for,
    to_float64,
)

from rljax_offline.algorithms.decision_transformer import DecisionTransformerConfig
from rljax_offline.data.device import (
    DeviceData,
    gather_rows,
    make_device_dataset,
    sample_valid_rows,
    sample_windows,
)
from rljax_offline.learning.data_parallel import DataParallel, prefetch_to_device, select_devices
from rljax_offline.learning.init import init_state
from rljax_offline.learning.update import AXIS

TOL64 = 1e-9
# Plain behavior cloning on a Box: the data layer is the subject here, not the losses.
_, BC_CONFIG, BC_SPACES = case_named("bc-box")


def _bc(n_rows, seed=0):
    spec = spec_for(BC_CONFIG, BC_SPACES)
    return spec.learning, random_columns(spec.data.columns, *BC_SPACES, n_rows, seed)


def test_gather_returns_exactly_the_rows_asked_for():
    n = 13  # not a multiple of 8: padded to 16
    cols = {"f": np.random.default_rng(0).normal(size=(n, 3)).astype(np.float32),
            "i": np.arange(n, dtype=np.int64) - 5, "b": np.arange(n) % 3 == 0,
            "u": (np.arange(n) * 19 % 256).astype(np.uint8)}
    learning, _ = _bc(8)
    dp = DataParallel(learning, select_devices(8), 16)
    data = dp.put_data(cols)
    positions = jnp.asarray(np.random.default_rng(1).integers(0, n, 16))
    gather = jax.jit(jax.shard_map(lambda shard, pos: gather_rows(shard, pos, AXIS), mesh=dp.mesh,
                                   in_specs=(P(AXIS), P()), out_specs=P(AXIS)))
    got = jax.device_get(gather(data.columns, positions))
    for k, v in cols.items():
        assert got[k].dtype == jax.dtypes.canonicalize_dtype(v.dtype)
        np.testing.assert_array_equal(got[k], v[np.asarray(positions)], err_msg=k)


def test_one_sampler_for_timesteps_and_episodes():
    key = jax.random.PRNGKey(0)
    rows = np.asarray(sample_valid_rows(key, 4096, 13))
    assert rows.min() == 0 and rows.max() == 12  # uniform over every row, never the padding
    assert abs(np.bincount(rows).std() / np.bincount(rows).mean()) < 0.2
    lengths = np.array([3, 5, 2, 7])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    batch = np.asarray(jax.jit(sample_valid_rows, static_argnums=(1, 2, 5))(
        key, 64, int(lengths.sum()), jnp.asarray(starts), jnp.asarray(lengths), "episodes"))
    # The batch is a concatenation of stretches, each from an episode's start, in order.
    i = 0
    while i < len(batch):
        e = int(np.searchsorted(starts, batch[i], side="right") - 1)
        assert batch[i] == starts[e], (i, batch)
        run = min(lengths[e], len(batch) - i)
        np.testing.assert_array_equal(batch[i:i + run], starts[e] + np.arange(run))
        i += run
    with pytest.raises(ValueError, match="sample_unit must be one of"):
        DataParallel(_bc(8)[0], select_devices(1), 8).scan_on_device(1, sample_unit="steps")


def test_the_device_dataset_checks_eagerly_and_samples_with_pure_functions():
    """`make_device_dataset` refuses bad arguments when it is made, never in traced code;
    its `put` / `sample` are plain functions: `sample` jits as it is (no axis: one device)
    and gives the rows `sample_valid_rows` draws."""
    place = dict(put_sharded=jax.device_put, put_replicated=jax.device_put)
    with pytest.raises(ValueError, match="sample_unit must be one of"):
        make_device_dataset(batch_size=4, num_local_devices=1, axis_name=None,
                            sample_unit="steps", **place)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        make_device_dataset(batch_size=0, num_local_devices=1, axis_name=None, **place)
    dataset = make_device_dataset(batch_size=8, num_local_devices=1, axis_name=None, **place)
    with pytest.raises(AttributeError):  # frozen
        dataset.put = None
    x = np.arange(5, dtype=np.float32) * 10
    data = dataset.put({"x": x}, episode_lengths=[2, 3])
    assert (data.num_rows, data.num_episodes, data.block_rows) == (5, 2, 5)
    key = jax.random.PRNGKey(3)
    got = np.asarray(jax.jit(dataset.sample)(key, data)["x"])
    np.testing.assert_array_equal(got, x[np.asarray(sample_valid_rows(key, 8, 5))])
    with pytest.raises(ValueError, match="sum to the 5 rows"):
        dataset.put({"x": x}, episode_lengths=[2, 2])


def _scan(learning, dp, data, unit, updates=4):
    state = dp.put_replicated(to_float64(init_state(learning, 5)))
    state, _ = dp.scan_on_device(updates, sample_unit=unit)(state, data)
    return jax.device_get(state)


def test_episode_sampling_eight_devices_and_pmap_equal_one():
    with jax.enable_x64(True):
        learning, data = _bc(203)
        data = to_float64(data)
        lengths = [50, 1, 70, 82]
        out = {}
        for mode, n in (("jit", 1), ("shard_map", 8), ("pmap", 8)):
            dp = DataParallel(learning, select_devices(n), 32, mode=mode)
            out[mode] = _scan(learning, dp, dp.put_data(data, episode_lengths=lengths),
                              "episodes")
        for mode in ("shard_map", "pmap"):
            diff = max_diff(out["jit"].params, out[mode].params)
            print(f"episode sampling, {mode} x8 vs one device: {diff:.3g}")
            assert diff < TOL64
        dp = DataParallel(learning, select_devices(1), 32)
        with pytest.raises(ValueError, match="sum to the 203 rows"):
            dp.put_data(data, episode_lengths=[1, 2])
        with pytest.raises(ValueError, match="needs put_data"):
            dp.scan_on_device(1, sample_unit="episodes")(
                dp.put_replicated(init_state(learning)), dp.put_data(data))


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=6),
       window=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_windows_end_anywhere_and_never_cross_an_episode(lengths, window, seed):
    """Each window is the up to `window` steps of one episode ending at its drawn step,
    from the episode's first step where fewer precede it, padded on the right (the padding
    repeats the last step and is masked)."""
    lengths = np.asarray(lengths)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    rows, held = map(np.asarray, sample_windows(
        jax.random.PRNGKey(seed), 32, window, int(lengths.sum()), jnp.asarray(starts)))
    assert rows.shape == held.shape == (32, window)
    for r, h in zip(rows, held):
        n = int(h.sum())
        assert n >= 1 and h[:n].all() and not h[n:].any()
        end = r[n - 1]
        first = starts[np.searchsorted(starts, end, side="right") - 1]
        assert n == min(window, end - first + 1)
        np.testing.assert_array_equal(r[:n], np.arange(end - n + 1, end + 1))
        assert (r[n:] == end).all()


def test_every_step_ends_windows_equally_often():
    lengths = np.array([3, 20, 1, 8])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    rows, held = sample_windows(jax.random.PRNGKey(1), 8192, 5, 32, jnp.asarray(starts))
    ends = np.asarray(rows)[np.arange(8192), np.asarray(held).sum(1) - 1]
    counts = np.bincount(ends, minlength=32)
    assert counts.min() > 0 and counts.std() / counts.mean() < 0.2


def test_window_sampling_eight_devices_and_pmap_equal_one():
    """A Decision Transformer (windows of 4 steps) trained on windows cut on the devices
    from row-sharded data: 8 devices under shard_map and pmap equal one, in float64; the
    sampled batch holds `[windows, 4]` columns with their mask and lengths."""
    config = DecisionTransformerConfig().training(
        **CASE_TRAINING["decision_transformer-box"])
    spec = spec_for(config, BOX)
    with jax.enable_x64(True):
        data = to_float64(random_columns(spec.data.columns, *BOX, 101, seed=3))
        lengths = [30, 1, 4, 66]
        out = {}
        for mode, n in (("jit", 1), ("shard_map", 8), ("pmap", 8)):
            dp = DataParallel(spec.learning, select_devices(n), 16, mode=mode)
            state = dp.put_replicated(to_float64(init_state(spec.learning, 5)))
            state, _ = dp.scan_on_device(3, "windows", 4)(
                state, dp.put_data(data, episode_lengths=lengths))
            out[mode] = jax.device_get(state)
        for mode in ("shard_map", "pmap"):
            diff = max_diff(out["jit"].params, out[mode].params)
            print(f"window sampling, {mode} x8 vs one device: {diff:.3g}")
            assert diff < TOL64
        dataset = DataParallel(spec.learning, select_devices(1), 16, mode="jit").dataset(
            "windows", 4)
        batch = jax.device_get(dataset.sample(jax.random.PRNGKey(0), dataset.put(
            data, episode_lengths=lengths)))
        assert batch["obs"].shape[:2] == batch["loss_mask"].shape == (16, 4)
        np.testing.assert_array_equal(batch["seq_lens"], batch["loss_mask"].sum(1))
        assert not np.any(batch["returns_to_go"][~batch["loss_mask"]])  # padding is zeros
    with pytest.raises(ValueError, match="needs window"):
        DataParallel(spec.learning, select_devices(1), 16).dataset("windows")


def test_multi_process_block_layout_equals_contiguous_rows():
    """Two processes' blocks (5 and 8 rows, each padded to 8) on one 8-device mesh sample
    exactly what one device does with the 13 rows in order."""
    with jax.enable_x64(True):
        learning, data = _bc(13, seed=2)
        data = to_float64(data)
        one = DataParallel(learning, select_devices(1), 16)
        ref = _scan(learning, one, one.put_data(data), "timesteps")
        # a plain dict of columns (host or replicated) is put on the devices first
        assert max_diff(ref.params, _scan(learning, one, data, "timesteps").params) == 0.0
        dp = DataParallel(learning, select_devices(8), 16)
        blocks = jax.tree_util.tree_map(
            lambda x: np.concatenate([x[:5], np.zeros((3, *x.shape[1:]), x.dtype), x[5:]]),
            data)
        laid_out = DeviceData(columns=dp.put_sharded(blocks),
                              episode_starts=dp.put_replicated(np.zeros(0, np.int32)),
                              episode_lengths=dp.put_replicated(np.zeros(0, np.int32)),
                              block_counts=(5, 8), block_rows=8)
        got = _scan(learning, dp, laid_out, "timesteps")
        assert max_diff(ref.params, got.params) < TOL64


# ---------------------------------------------------------------------- the prefetch thread


def _prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "rljax-offline-prefetch"]


def _wait_until(cond, seconds=10.0):
    end = time.monotonic() + seconds
    while not cond() and time.monotonic() < end:
        time.sleep(0.02)
    return cond()


def test_prefetch_thread_never_leaks():
    device = jax.devices()[0]
    closed = []

    def source(n):
        try:
            for i in range(n):
                yield {"x": np.full(4, i, np.float32)}
        finally:
            closed.append(n)

    before = len(_prefetch_threads())
    # exhausted: every batch, in order, on the device; then the thread is gone
    got = [int(b["x"][0]) for b in prefetch_to_device(source(5), device, size=2)]
    assert got == list(range(5))
    assert _wait_until(lambda: len(_prefetch_threads()) == before)
    # closed early: the thread stops and the source is closed (its finally runs)
    with prefetch_to_device(source(1000), device, size=2) as it:
        assert isinstance(next(it)["x"], jax.Array)
    assert not it.alive and 1000 in closed
    with pytest.raises(StopIteration):
        next(it)
    # an error in the source is raised by next(), and the thread ends

    def broken():
        yield {"x": np.zeros(4)}
        raise OSError("disk gone")

    failing = prefetch_to_device(broken(), device)
    next(failing)
    with pytest.raises(OSError, match="disk gone"):
        next(failing)
    assert _wait_until(lambda: not failing.alive)
    # abandoned mid-stream: collected, and the thread stops by itself
    abandoned = prefetch_to_device(source(10_000), device, size=2)
    next(abandoned)
    del abandoned
    gc.collect()
    assert _wait_until(lambda: len(_prefetch_threads()) == before)
    assert 10_000 in closed
    with pytest.raises(ValueError, match="prefetch size must be >= 1"):
        prefetch_to_device(source(1), device, size=0)


def test_a_dropped_streaming_algorithm_ends_its_prefetch_thread(rllib_fixtures):
    from rljax_offline import BCConfig

    before = len(_prefetch_threads())
    algo = (BCConfig().environment("CartPole-v1")
            .offline_data(input_=str(rllib_fixtures / "episodes"), materialize_data=False,
                          materialize_mapped_data=False)
            .training(train_batch_size_per_learner=64, num_updates_per_iteration=2)
            .rl_module(model_config={"fcnet_hiddens": [8]})
            .evaluation(evaluation_interval=0).learners(compilation_cache_dir=None).build())
    algo.train()
    assert len(_prefetch_threads()) == before + 1
    del algo  # no stop(): collection alone ends the thread
    gc.collect()
    assert _wait_until(lambda: len(_prefetch_threads()) == before)
