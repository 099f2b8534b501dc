"""Checkpoints of a TrainState: round trip (params, optimizer state, step, RNG, connector
state), config JSON, atomic replacement, exact resume of the learner's on-device scan."""

import os

import jax
import numpy as np
import pytest
from flax import serialization
from learner_testlib import DISCRETE, assert_leaves_equal, random_columns, spec_for

from rljax_offline.algorithms.bc import BCConfig
from rljax_offline.learning import checkpoint as ckpt
from rljax_offline.learning.data_parallel import DataParallel, select_devices
from rljax_offline.learning.init import init_state


def bc_spec(hiddens):
    return spec_for(BCConfig().training(lr=1e-3).rl_module(
        model_config={"fcnet_hiddens": list(hiddens)}), DISCRETE)


@pytest.fixture(scope="module")
def learner():
    bc = bc_spec((32, 32))
    data = random_columns(bc.data.columns, *DISCRETE, 2048)
    dp = DataParallel(bc.learning, select_devices(2), 256)
    return bc.learning, None, dp, dp.scan_on_device(10), dp.put_data(data)


def test_round_trip_keeps_every_part_of_the_state(learner, tmp_path):
    policy, opt, dp, scan, data = learner
    cstate = ({"count": np.float32(7.0), "mean": np.arange(4, dtype=np.float32)},)
    state = init_state(policy, seed=3, connector_state=cstate)
    state, _ = scan(dp.put_replicated(state), data)
    config = {"lr": 1e-3, "fcnet_hiddens": [32, 32]}
    ckpt.save_checkpoint(str(tmp_path / "c"), state, {"config": config, "iteration": 1})
    target = init_state(policy, seed=99, connector_state=jax.tree_util.tree_map(
        np.zeros_like, cstate))
    back = ckpt.load_state(str(tmp_path / "c"), target)
    assert_leaves_equal(back, jax.device_get(state))
    assert int(back.step) == 10
    assert ckpt.load_meta(str(tmp_path / "c")) == {"config": config, "iteration": 1}


def test_resume_then_train_equals_uninterrupted(learner, tmp_path):
    policy, opt, dp, scan, data = learner
    straight = dp.put_replicated(init_state(policy, seed=5))
    losses = []
    for _ in range(3):
        straight, m = scan(straight, data)
        losses.append(float(m["policy_loss"]))
    state, _ = scan(dp.put_replicated(init_state(policy, seed=5)), data)
    ckpt.save_checkpoint(str(tmp_path / "c"), state, {"iteration": 1})
    del state
    resumed = dp.put_replicated(ckpt.load_state(str(tmp_path / "c"),
                                                init_state(policy, seed=0)))
    for want in losses[1:]:
        resumed, m = scan(resumed, data)
        assert float(m["policy_loss"]) == want
    assert_leaves_equal(jax.device_get(resumed), jax.device_get(straight))


def test_save_is_atomic(learner, tmp_path, monkeypatch):
    policy, opt, *_ = learner
    path = str(tmp_path / "c")
    first = init_state(policy, seed=1)
    ckpt.save_checkpoint(path, first, {"iteration": 1})

    def broken(_):
        raise OSError("disk full")

    monkeypatch.setattr(serialization, "to_bytes", broken)
    with pytest.raises(OSError, match="disk full"):
        ckpt.save_checkpoint(path, init_state(policy, seed=2), {"iteration": 2})
    assert os.listdir(tmp_path) == ["c"]  # no temp folder left behind
    assert ckpt.load_meta(path)["iteration"] == 1
    assert_leaves_equal(ckpt.load_state(path, first), jax.device_get(first))
    monkeypatch.undo()
    ckpt.save_checkpoint(path, init_state(policy, seed=2), {"iteration": 2})
    assert ckpt.load_meta(path)["iteration"] == 2 and os.listdir(tmp_path) == ["c"]


def test_mismatched_checkpoints_are_refused(learner, tmp_path):
    policy, opt, *_ = learner
    ckpt.save_checkpoint(str(tmp_path / "c"), init_state(policy), {})
    with pytest.raises(ValueError, match="does not match"):
        ckpt.load_state(str(tmp_path / "c"), init_state(bc_spec((16,)).learning))
    with pytest.raises(FileNotFoundError, match="not a checkpoint"):
        ckpt.load_meta(str(tmp_path))


def test_extra_files_are_checksummed_and_read_back(tmp_path):
    """`save_checkpoint(files=...)` (a streamed run's `stream.msgpack`): read back by
    `load_file`, verified like the state; None where a checkpoint has no such file; our own
    file names and paths are refused."""
    path = str(tmp_path / "c")
    ckpt.save_checkpoint(path, {"w": np.ones(3)}, {"iteration": 1}, {"extra.bin": b"\x01\x02"})
    assert ckpt.load_file(path, "extra.bin") == b"\x01\x02"
    assert ckpt.load_file(path, "other.bin") is None
    gen = sorted(n for n in os.listdir(path) if n.startswith("gen-"))[-1]
    with open(os.path.join(path, gen, "extra.bin"), "wb") as f:
        f.write(b"\x01\x03")
    with pytest.raises(ckpt.CheckpointError, match="extra.bin fails its checksum"):
        ckpt.load_file(path, "extra.bin")
    for bad in (ckpt.META_FILE, "sub/x", ".hidden"):
        with pytest.raises(ValueError, match="plain names"):
            ckpt.save_checkpoint(path, {"w": np.ones(3)}, {}, {bad: b""})
