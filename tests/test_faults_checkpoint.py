"""Checkpoint faults: a process killed at every file-system step of a save leaves the previous
or the new checkpoint complete and loadable; flipped bytes and damaged meta are named errors."""

import json
import os

import numpy as np
import pytest
from fault_testlib import checkpoint_state, crash_checkpoint_saves

from rljax_offline.errors import CheckpointError, RljaxError
from rljax_offline.learning import checkpoint as ckpt


def test_kill_at_every_step_of_a_save_leaves_a_complete_checkpoint(tmp_path):
    target = checkpoint_state(0)
    runs = crash_checkpoint_saves(tmp_path)
    assert runs[-1][2] and not any(done for _, _, done in runs[:-1])
    assert len(runs) > 8  # the save has at least this many crash points
    for path, crash_at, _ in runs:
        iteration = ckpt.load_meta(path)["iteration"]
        assert iteration in (1, 2), crash_at
        back = ckpt.load_state(path, target)
        want = checkpoint_state(iteration)
        assert np.array_equal(back["w"], want["w"]) and int(back["step"]) == iteration
        # The next save succeeds and removes what the crashed one left behind.
        ckpt.save_checkpoint(path, checkpoint_state(3), {"iteration": 3})
        assert ckpt.load_meta(path)["iteration"] == 3
        assert len(os.listdir(path)) == 1, os.listdir(path)


def _newest_gen(path):
    return os.path.join(path, sorted(n for n in os.listdir(path) if n.startswith("gen-"))[-1])


def _load(path, name):
    if name == ckpt.META_FILE:
        return ckpt.load_meta(path)
    return ckpt.load_state(path, checkpoint_state(0))


@pytest.mark.parametrize("name", [ckpt.STATE_FILE, ckpt.META_FILE])
def test_every_flipped_byte_is_a_named_error(tmp_path, name):
    path = str(tmp_path / "c")
    ckpt.save_checkpoint(path, checkpoint_state(1), {"iteration": 1, "config": {"lr": 0.1}})
    file = os.path.join(_newest_gen(path), name)
    good = open(file, "rb").read()
    rng = np.random.default_rng(0)
    for pos in rng.choice(len(good), size=min(len(good), 40), replace=False):
        bad = bytearray(good)
        bad[pos] ^= 1 << int(rng.integers(8))
        open(file, "wb").write(bytes(bad))
        with pytest.raises(CheckpointError, match="checksum"):
            _load(path, name)
    open(file, "wb").write(good[:-3])
    with pytest.raises(CheckpointError, match="checksum"):
        _load(path, name)


def test_missing_or_corrupt_meta_and_manifest_are_named_errors(tmp_path):
    path = str(tmp_path / "c")
    ckpt.save_checkpoint(path, checkpoint_state(1), {"iteration": 1})
    gen = _newest_gen(path)
    manifest = open(os.path.join(gen, ckpt.MANIFEST_FILE)).read()
    open(os.path.join(gen, ckpt.MANIFEST_FILE), "w").write(manifest[:10])
    with pytest.raises(CheckpointError, match="manifest.json is corrupt"):
        ckpt.load_meta(path)
    os.remove(os.path.join(gen, ckpt.MANIFEST_FILE))
    with pytest.raises(CheckpointError, match="manifest.json is missing"):
        ckpt.load_meta(path)
    ckpt.save_checkpoint(path, checkpoint_state(1), {"iteration": 1})
    os.remove(os.path.join(_newest_gen(path), ckpt.META_FILE))
    with pytest.raises(CheckpointError, match="meta.json is missing"):
        ckpt.load_meta(path)
    with pytest.raises(RljaxError, match="not a checkpoint"):
        ckpt.load_meta(str(tmp_path / "nowhere"))


def test_earlier_layout_without_manifest_still_loads(tmp_path):
    from flax import serialization

    path = tmp_path / "old"
    path.mkdir()
    (path / ckpt.STATE_FILE).write_bytes(serialization.to_bytes(checkpoint_state(4)))
    (path / ckpt.META_FILE).write_text(json.dumps({"iteration": 4}))
    assert ckpt.load_meta(str(path)) == {"iteration": 4}
    back = ckpt.load_state(str(path), checkpoint_state(0))
    assert np.array_equal(back["w"], checkpoint_state(4)["w"])
    (path / ckpt.META_FILE).write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="JSON object"):
        ckpt.load_meta(str(path))
