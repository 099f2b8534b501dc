"""Crash-safe, checksummed checkpoints of a training state.

A checkpoint `path` is a folder of generations. A save writes `state.msgpack` (params,
optimizer state, step, RNG, connector state through `flax.serialization`), `meta.json`
(config, iteration, history), any further files the caller names (e.g. `stream.msgpack`, the
cursor of streamed data) and `manifest.json` (SHA-256 and size of each) into a hidden temp
folder inside `path`, fsyncs every file and the folder, and commits with one atomic
`rename` to `path/gen-<n>`. Only then are older generations deleted. A crash (kill -9, power
loss) between any two file-system operations therefore leaves the previous generation or the
new one complete: readers take the newest `gen-*` folder, which exists only once complete.
Loading verifies both checksums, so a flipped byte is a `CheckpointError`, never a silent load.

Why not orbax-checkpoint: its commit is the same temp-folder-and-rename protocol, but it adds
an async runtime, tensorstore and its own folder layout, and it does not checksum content; the
protocol here is small enough to test at every crash point (tests/test_faults_checkpoint.py).

Checkpoints of the earlier layout (`state.msgpack` and `meta.json` directly in `path`, no
manifest) still load, without checksums.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from typing import Any

import jax
import numpy as np
from flax import serialization

from rljax_offline.errors import CheckpointError, CheckpointNotFoundError

STATE_FILE, META_FILE, MANIFEST_FILE = "state.msgpack", "meta.json", "manifest.json"
FORMAT = 2
_GEN = re.compile(r"^gen-(\d{8})$")
_TMP_PREFIX = ".tmp-"


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_synced(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _generations(path: str) -> list[tuple[int, str]]:
    try:
        names = os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []
    gens = [(int(m.group(1)), name) for name in names if (m := _GEN.match(name))]
    return sorted(gens)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def save_checkpoint(path: str, state: Any, meta: dict, files: dict[str, bytes] | None = None
                    ) -> str:
    """Saves a checkpoint as the newest generation at `path`, crash-safe at every step (see
    the module docstring).

    Args:
      path: the checkpoint folder (made if missing).
      state: any pytree (a `TrainState`).
      meta: JSON-able facts about it (the config, the algorithm's name, ...).
      files: extra files, name -> bytes, checksummed like the others (read back with
        `load_file`).

    Returns:
      `path`.
    """
    files = dict(files or {})
    clash = set(files) & {STATE_FILE, META_FILE, MANIFEST_FILE}
    if clash or any(os.sep in name or name.startswith(".") for name in files):
        raise ValueError(f"extra checkpoint files need plain names other than ours, got "
                         f"{sorted(files)}")
    path = os.path.abspath(os.fspath(path))
    if os.path.exists(path) and not os.path.isdir(path):
        raise CheckpointError(f"checkpoint path {path!r} exists and is not a folder")
    os.makedirs(path, exist_ok=True)
    gens = _generations(path)
    number = gens[-1][0] + 1 if gens else 1
    tmp = tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=path)
    try:
        host = jax.tree_util.tree_map(np.asarray, jax.device_get(state))
        state_bytes = serialization.to_bytes(host)
        meta_bytes = json.dumps(meta, default=float).encode()
        contents = {STATE_FILE: state_bytes, META_FILE: meta_bytes, **files}
        manifest = {"format": FORMAT, "files": {
            name: {"sha256": _digest(data), "size": len(data)}
            for name, data in contents.items()}}
        for name, data in contents.items():
            _write_synced(os.path.join(tmp, name), data)
        _write_synced(os.path.join(tmp, MANIFEST_FILE), json.dumps(manifest).encode())
        _fsync_dir(tmp)
        final = os.path.join(path, f"gen-{number:08d}")
        try:
            os.rename(tmp, final)  # the commit
        except OSError:
            if not os.path.isdir(final):
                raise
            raise CheckpointError(f"another process committed {final!r} at the same time; "
                                  "one checkpoint folder takes one writer") from None
        _fsync_dir(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _collect_garbage(path, keep=number)
    return path


def _collect_garbage(path: str, keep: int) -> None:
    """Deletes generations older than `keep`, leftover temp folders of crashed saves and files
    of the earlier single-folder layout."""
    for number, name in _generations(path):
        if number < keep:
            shutil.rmtree(os.path.join(path, name), ignore_errors=True)
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if name.startswith(_TMP_PREFIX):
            shutil.rmtree(full, ignore_errors=True)
        elif name in (STATE_FILE, META_FILE):
            os.remove(full)


def _newest(path: str) -> tuple[str, bool]:
    """The folder holding the newest complete checkpoint and whether it has a manifest."""
    gens = _generations(path)
    if gens:
        return os.path.join(path, gens[-1][1]), True
    if os.path.isfile(os.path.join(path, META_FILE)):
        return path, False  # the earlier layout
    raise CheckpointNotFoundError(f"{path!r} is not a checkpoint: no complete generation "
                                  f"(gen-*) and no {META_FILE} in it")


def _read_verified(path: str, name: str) -> bytes:
    folder, checked = _newest(path)
    file = os.path.join(folder, name)
    try:
        with open(file, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path!r} is incomplete: {name} is missing "
                              f"from {folder!r}") from None
    if not checked:
        return data
    try:
        with open(os.path.join(folder, MANIFEST_FILE), "rb") as f:
            entry = json.loads(f.read())["files"][name]
        want_hash, want_size = entry["sha256"], entry["size"]
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path!r} is incomplete: {MANIFEST_FILE} is "
                              f"missing from {folder!r}") from None
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"checkpoint {path!r}: {MANIFEST_FILE} is corrupt "
                              f"({type(e).__name__}: {e})") from None
    if len(data) != want_size or _digest(data) != want_hash:
        raise CheckpointError(f"checkpoint {path!r}: {name} fails its checksum (file of "
                              f"{len(data)} bytes, {want_size} expected): the file is damaged")
    return data


def load_meta(path: str) -> dict:
    """The meta dict of the newest checkpoint at `path` (checksum verified).

    Args:
      path: the checkpoint folder.

    Raises:
      CheckpointNotFoundError: no complete checkpoint at `path`.
      CheckpointError: a corrupt meta or manifest.
    """
    raw = _read_verified(os.fspath(path), META_FILE)
    try:
        meta = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise CheckpointError(f"checkpoint {path!r}: {META_FILE} is not valid JSON: "
                              f"{e}") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"checkpoint {path!r}: {META_FILE} must hold a JSON object, got "
                              f"{type(meta).__name__}")
    return meta


def load_file(path: str, name: str) -> bytes | None:
    """The bytes of an extra file saved with the newest checkpoint (checksum verified).

    Args:
      path: the checkpoint folder.
      name: the file's name as given to `save_checkpoint(files=...)`.

    Returns:
      Its bytes, or None when that checkpoint has no such file.
    """
    folder, _ = _newest(os.fspath(path))
    if not os.path.exists(os.path.join(folder, name)):
        return None
    return _read_verified(os.fspath(path), name)


def load_state(path: str, target: Any) -> Any:
    """The saved state (checksum verified), in the structure and dtypes of `target`.

    Args:
      path: the checkpoint folder.
      target: a pytree of the saved state's structure (e.g. a freshly initialised
        `TrainState`).

    Raises:
      CheckpointError: a checksum mismatch, or a state that does not fit `target`.
    """
    raw = _read_verified(os.fspath(path), STATE_FILE)
    host_target = jax.tree_util.tree_map(np.asarray, jax.device_get(target))
    try:
        restored = serialization.from_bytes(host_target, raw)
    except Exception as e:  # noqa: BLE001 - flax/msgpack raise many types for a mismatch
        raise CheckpointError(f"checkpoint {path!r} does not match this model/config: "
                              f"{type(e).__name__}: {e}") from None
    # flax restores leaves by name without checking shapes: check them here.
    for (where, want), got in zip(jax.tree_util.tree_leaves_with_path(host_target),
                                  jax.tree_util.tree_leaves(restored)):
        if np.shape(want) != np.shape(got):
            raise CheckpointError(f"checkpoint {path!r} does not match this model/config: "
                                  f"{jax.tree_util.keystr(where)} has shape {np.shape(got)} in "
                                  f"the checkpoint but {np.shape(want)} here")
    return restored
