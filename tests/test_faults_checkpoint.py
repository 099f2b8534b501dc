"""Checkpoint faults: a process killed at every file-system step of a save leaves the previous
or the new checkpoint complete and loadable; flipped bytes and damaged meta are named errors."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from rljax_offline.data.errors import CheckpointError, RljaxError
from rljax_offline.learners import checkpoint as ckpt

# Saves generation 1, then saves generation 2 with every file-system operation of the save
# counted; at operation number CRASH_AT the process dies on the spot (os._exit: no cleanup,
# no finally blocks), after writing half of the bytes when the operation is a write.
_CRASHER = textwrap.dedent("""
    import builtins, os, shutil, sys
    import numpy as np
    from rljax_offline.learners import checkpoint as ckpt

    path, crash_at = sys.argv[1], int(sys.argv[2])
    def state(seed):
        rng = np.random.default_rng(seed)
        return {"w": rng.normal(size=(64, 32)).astype(np.float32), "step": np.int64(seed)}
    ckpt.save_checkpoint(path, state(1), {"iteration": 1})
    count = [0]
    def tick():
        count[0] += 1
        return count[0] == crash_at
    def counted(fn):
        def wrapper(*a, **k):
            if tick():
                os._exit(0)
            return fn(*a, **k)
        return wrapper
    class TornFile:
        def __init__(self, f):
            self.f = f
        def write(self, data):
            if tick():
                self.f.write(data[: len(data) // 2]); self.f.flush(); os._exit(0)
            return self.f.write(data)
        def __getattr__(self, name):
            return getattr(self.f, name)
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            return self.f.__exit__(*exc)
    real_open = builtins.open
    def torn_open(*a, **k):
        if tick():
            os._exit(0)
        return TornFile(real_open(*a, **k))
    for mod, name in ((os, "rename"), (os, "replace"), (os, "fsync"), (os, "mkdir"),
                      (os, "remove"), (os, "unlink"), (os, "rmdir"), (shutil, "rmtree")):
        setattr(mod, name, counted(getattr(mod, name)))
    ckpt.open = torn_open
    ckpt.save_checkpoint(path, state(2), {"iteration": 2})
    print("COMPLETED", count[0])
""")


def _state(seed):
    rng = np.random.default_rng(seed)
    return {"w": rng.normal(size=(64, 32)).astype(np.float32), "step": np.int64(seed)}


def _run_crash(path, crash_at):
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", _CRASHER, str(path), str(crash_at)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return "COMPLETED" in out.stdout


def test_kill_at_every_step_of_a_save_leaves_a_complete_checkpoint(tmp_path):
    target = _state(0)
    crash_at, completed = 1, False
    while not completed:
        path = tmp_path / f"c{crash_at}"
        completed = _run_crash(path, crash_at)
        iteration = ckpt.load_meta(str(path))["iteration"]
        assert iteration in (1, 2), crash_at
        back = ckpt.load_state(str(path), target)
        want = _state(iteration)
        assert np.array_equal(back["w"], want["w"]) and int(back["step"]) == iteration
        # The next save succeeds and removes what the crashed one left behind.
        ckpt.save_checkpoint(str(path), _state(3), {"iteration": 3})
        assert ckpt.load_meta(str(path))["iteration"] == 3
        assert len(os.listdir(path)) == 1, os.listdir(path)
        crash_at += 1
    assert crash_at > 8  # the save has at least this many crash points


def _newest_gen(path):
    return os.path.join(path, sorted(n for n in os.listdir(path) if n.startswith("gen-"))[-1])


@pytest.mark.parametrize("name", [ckpt.STATE_FILE, ckpt.META_FILE])
def test_every_flipped_byte_is_a_named_error(tmp_path, name):
    path = str(tmp_path / "c")
    ckpt.save_checkpoint(path, _state(1), {"iteration": 1, "config": {"lr": 0.1}})
    file = os.path.join(_newest_gen(path), name)
    good = open(file, "rb").read()
    rng = np.random.default_rng(0)
    for pos in rng.choice(len(good), size=min(len(good), 40), replace=False):
        bad = bytearray(good)
        bad[pos] ^= 1 << int(rng.integers(8))
        open(file, "wb").write(bytes(bad))
        with pytest.raises(CheckpointError, match="checksum"):
            ckpt.load_meta(path) if name == ckpt.META_FILE else ckpt.load_state(path, _state(0))
    open(file, "wb").write(good[:-3])
    with pytest.raises(CheckpointError, match="checksum"):
        ckpt.load_meta(path) if name == ckpt.META_FILE else ckpt.load_state(path, _state(0))


def test_missing_or_corrupt_meta_and_manifest_are_named_errors(tmp_path):
    path = str(tmp_path / "c")
    ckpt.save_checkpoint(path, _state(1), {"iteration": 1})
    gen = _newest_gen(path)
    manifest = open(os.path.join(gen, ckpt.MANIFEST_FILE)).read()
    open(os.path.join(gen, ckpt.MANIFEST_FILE), "w").write(manifest[:10])
    with pytest.raises(CheckpointError, match="manifest.json is corrupt"):
        ckpt.load_meta(path)
    os.remove(os.path.join(gen, ckpt.MANIFEST_FILE))
    with pytest.raises(CheckpointError, match="manifest.json is missing"):
        ckpt.load_meta(path)
    ckpt.save_checkpoint(path, _state(1), {"iteration": 1})
    os.remove(os.path.join(_newest_gen(path), ckpt.META_FILE))
    with pytest.raises(CheckpointError, match="meta.json is missing"):
        ckpt.load_meta(path)
    with pytest.raises(RljaxError, match="not a checkpoint"):
        ckpt.load_meta(str(tmp_path / "nowhere"))


def test_earlier_layout_without_manifest_still_loads(tmp_path):
    from flax import serialization

    path = tmp_path / "old"
    path.mkdir()
    (path / ckpt.STATE_FILE).write_bytes(serialization.to_bytes(_state(4)))
    (path / ckpt.META_FILE).write_text(json.dumps({"iteration": 4}))
    assert ckpt.load_meta(str(path)) == {"iteration": 4}
    assert np.array_equal(ckpt.load_state(str(path), _state(0))["w"], _state(4)["w"])
    (path / ckpt.META_FILE).write_text("[1, 2]")
    with pytest.raises(CheckpointError, match="JSON object"):
        ckpt.load_meta(str(path))
