"""The learning core, for every algorithm in `learner_testlib.ALGORITHM_CASES` (the default
run: its representatives, `DEFAULT_RUN_CASES`; CI: all):

* shard_map (check_vma on) over 8 and 1 devices, jax.pmap over 8, and plain jit agree;
* the on-device scan over 8 devices equals 1 device;
* padded (masked) rows never count;
* streamed updates equal the step loop.

Equivalence is checked in float64 (`jax.enable_x64`), where summation order changes results by
~1e-16 relative, so a tolerance of 1e-9 holds on any x86-64 CPU; the observed difference is
printed. (In float32 Adam amplifies reduction-order differences to ~1e-4 after tens of steps.)
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from learner_testlib import (
    ALGORITHM_CASES,
    case_ids,
    max_diff,
    random_columns,
    spec_for,
    to_float64,
    with_slow_marks,
)

from rljax_offline.learning.data_parallel import DataParallel, prefetch_to_device, select_devices
from rljax_offline.learning.init import init_state
from rljax_offline.learning.spec import LearningSpec, Loss

TOL64 = 1e-9


def _setup(case, n_rows=64, seed=0):
    _, config, spaces = case
    spec = spec_for(config, spaces)
    data = random_columns(spec.data.columns, *spaces, n_rows, seed)
    return spec.learning, data


def _run_steps(learning, mode, n_dev, batches, seed=0):
    dp = DataParallel(learning, select_devices(n_dev), len(batches[0]["obs"]), mode=mode)
    state = dp.put_replicated(to_float64(init_state(learning, seed)))
    metrics = None
    for b in batches:
        state, metrics = dp.step(state, to_float64(b))
    return jax.device_get(state), jax.device_get(metrics)


@pytest.mark.parametrize("case", with_slow_marks(), ids=case_ids())
def test_modes_and_device_counts_agree(case):
    with jax.enable_x64(True):
        learning, data = _setup(case)
        rng = np.random.default_rng(1)
        batches = []
        for _ in range(3):
            idx = rng.integers(0, 64, 32)
            b = {k: v[idx] for k, v in data.items()}
            b["loss_mask"] = rng.random(32) < 0.8
            batches.append(b)
        ref, ref_m = _run_steps(learning, "jit", 1, batches)
        for mode, n in (("shard_map", 8), ("shard_map", 1), ("pmap", 8)):
            got, got_m = _run_steps(learning, mode, n, batches)
            diff = max_diff(ref.params, got.params)
            print(f"{case[0]} {mode}x{n}: max |param difference| vs jit = {diff:.3g}")
            assert diff < TOL64, (mode, n, diff)
            assert max_diff(ref.opt_states, got.opt_states) < TOL64
            assert max_diff(ref.extra, got.extra) < TOL64
            for k, v in ref_m.items():
                np.testing.assert_allclose(got_m[k], v, rtol=1e-9, atol=1e-9, err_msg=k)
            assert int(got.step) == 3


@pytest.mark.parametrize("case", with_slow_marks(), ids=case_ids())
def test_scan_on_eight_devices_equals_one(case):
    """The data sharded on rows (250 rows: padded to 256 over 8 devices, the padding never
    drawn)."""
    with jax.enable_x64(True):
        learning, data = _setup(case, n_rows=250)
        out = {}
        for n in (1, 8):
            dp = DataParallel(learning, select_devices(n), 64)
            state = dp.put_replicated(to_float64(init_state(learning, 3)))
            on_device = dp.put_data(to_float64(data))
            shard = on_device.columns["obs"].addressable_shards[0].data
            assert shard.shape[0] == -(-250 // n)  # each device holds its rows, not all
            state, metrics = dp.scan_on_device(5)(state, on_device)
            out[n] = jax.device_get(state)
            assert int(out[n].step) == 5
        diff = max_diff(out[1].params, out[8].params)
        print(f"{case[0]}: 8 devices vs 1 after 5 scanned updates: {diff:.3g}")
        assert diff < TOL64


@pytest.mark.parametrize("case", with_slow_marks(), ids=case_ids())
def test_masked_rows_do_not_count(case):
    learning, data = _setup(case, n_rows=64)
    dp = DataParallel(learning, select_devices(8), 64)
    state = jax.device_get(init_state(learning, 2))
    mask = np.arange(64) % 3 != 0
    junk = {k: (np.where(mask.reshape(-1, *[1] * (np.ndim(v) - 1)), v, 50).astype(v.dtype)
                if np.issubdtype(np.asarray(v).dtype, np.floating) else v)
            for k, v in data.items()}
    a, ma = dp.step(dp.put_replicated(state), {**data, "loss_mask": mask})
    b, mb = dp.step(dp.put_replicated(state), {**junk, "loss_mask": mask})
    assert max_diff(a.params, b.params) < 1e-6
    assert float(ma["num_module_steps_trained"]) == mask.sum()


def test_streamed_updates_equal_the_step_loop():
    learning, data = _setup(ALGORITHM_CASES[0], n_rows=512)
    dp = DataParallel(learning, select_devices(4), 64)
    rng = np.random.default_rng(3)
    batches = [{k: v[idx] for k, v in data.items()}
               for idx in (rng.integers(0, 512, 64) for _ in range(5))]
    state = dp.put_replicated(init_state(learning, 3))
    losses = []
    for b in batches:
        state, m = dp.step(state, dp.put_sharded(b))
        losses.append(float(m["policy_loss"]))
    stream = prefetch_to_device(iter(batches), dp.sharded, size=2)
    streamed = dp.put_replicated(init_state(learning, 3))
    streamed, m = dp.stream_updates(streamed, stream, 3)
    streamed, m = dp.stream_updates(streamed, stream, 2)  # the in-flight batches carry over
    assert max_diff(state.params, streamed.params) == 0.0
    np.testing.assert_allclose(float(m["policy_loss_mean"]), np.mean(losses[3:]), rtol=1e-6)
    with pytest.raises(StopIteration):
        next(stream)
    with pytest.raises(ValueError, match="exactly train_batch_size_per_learner=64"):
        dp.stream_updates(streamed, iter([{k: v[:10] for k, v in data.items()}]), 1)


def test_several_optimizers_targets_and_the_axis_mean():
    """A toy two-loss spec: the second loss sees the first one's update; the Polyak
    target follows `tau`; `axis.mean` is the mean over all devices' rows."""

    def init(rng):
        return {"a": jnp.zeros(()), "b": jnp.zeros(())}

    def loss_a(params, batch, rng, axis):  # pulls a towards the global mean of x
        return (params["a"] - batch["x"]) ** 2, {"x_mean": axis.mean(batch["x"])}

    def loss_b(params, batch, rng, axis):  # pulls b towards a (already updated)
        return (params["b"] - jax.lax.stop_gradient(params["a"])) ** 2 * jnp.ones_like(
            batch["x"]), {}

    learning = LearningSpec(init=init,
                           losses=(Loss("a", ("a",), loss_a, optax.sgd(0.25)),
                                   Loss("b", ("b",), loss_b, optax.sgd(0.5))),
                           targets={"target_a": "a"}, tau=0.5)
    x = np.arange(8, dtype=np.float32)
    for n in (1, 8):
        dp = DataParallel(learning, select_devices(n), 8)
        state, m = dp.step(dp.put_replicated(init_state(learning)), {"x": x})
        # d/da mean((a - x)^2) at a=0 is -2 mean(x) = -7; a = 0.25 * 7 = 1.75
        np.testing.assert_allclose(float(state.params["a"]), 1.75, rtol=1e-6)
        # b: gradient 2 (b - a) = -3.5; b = 0.5 * 3.5 = 1.75
        np.testing.assert_allclose(float(state.params["b"]), 1.75, rtol=1e-6)
        np.testing.assert_allclose(float(state.params["target_a"]), 0.875, rtol=1e-6)
        np.testing.assert_allclose(float(m["x_mean"]), 3.5, rtol=1e-6)
        assert set(state.opt_states) == {"a", "b"}


def test_bad_learners_and_batches_are_named_errors():
    learning, _ = _setup(ALGORITHM_CASES[0])
    with pytest.raises(ValueError, match="does not divide over 8 devices"):
        DataParallel(learning, select_devices(8), 100)
    with pytest.raises(ValueError, match="local devices exist"):
        select_devices(99)
    with pytest.raises(ValueError, match="mode must be one of"):
        DataParallel(learning, select_devices(1), 8, mode="vmap")
    with pytest.raises(ValueError, match="one device"):
        DataParallel(learning, select_devices(2), 8, mode="jit")
    twice = learning._replace(losses=learning.losses * 2)
    with pytest.raises(ValueError, match="loss names must be unique"):
        init_state(twice)
    bad = learning._replace(losses=(learning.losses[0]._replace(networks=("critic",)),))
    with pytest.raises(KeyError, match="does not create"):
        init_state(bad)
