"""Atomic checkpoints of a training state, with flax's msgpack serialization.

A checkpoint is a folder: `state.msgpack` (params, optimizer state, step, RNG, connector state
through `flax.serialization`), `meta.json` (config, iteration, history). It is written to a
hidden temp folder and renamed into place, so a crash leaves the old checkpoint or the new one,
never half of one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

import jax
import numpy as np
from flax import serialization

STATE_FILE, META_FILE = "state.msgpack", "meta.json"


def save_checkpoint(path: str, state: Any, meta: dict) -> str:
    path = os.path.abspath(os.fspath(path))
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=parent)
    try:
        host = jax.tree_util.tree_map(np.asarray, jax.device_get(state))
        with open(os.path.join(tmp, STATE_FILE), "wb") as f:
            f.write(serialization.to_bytes(host))
            f.flush()
            os.fsync(f.fileno())
        with open(os.path.join(tmp, META_FILE), "w") as f:
            json.dump(meta, f, default=float)
        old = None
        if os.path.exists(path):
            old = f"{tmp}.old"
            os.replace(path, old)
        os.replace(tmp, path)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def load_meta(path: str) -> dict:
    file = os.path.join(path, META_FILE)
    if not os.path.isfile(file):
        raise FileNotFoundError(f"{path!r} is not a checkpoint: {META_FILE} is missing")
    with open(file) as f:
        return json.load(f)


def load_state(path: str, target: Any) -> Any:
    """The saved state, in the structure (and dtypes) of `target`."""
    file = os.path.join(path, STATE_FILE)
    if not os.path.isfile(file):
        raise FileNotFoundError(f"{path!r} is not a checkpoint: {STATE_FILE} is missing")
    with open(file, "rb") as f:
        raw = f.read()
    host_target = jax.tree_util.tree_map(np.asarray, jax.device_get(target))
    try:
        restored = serialization.from_bytes(host_target, raw)
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"checkpoint {path!r} does not match this model/config: {e}") from e
    # flax restores leaves by name without checking shapes: check them here.
    for (where, want), got in zip(jax.tree_util.tree_leaves_with_path(host_target),
                                  jax.tree_util.tree_leaves(restored)):
        if np.shape(want) != np.shape(got):
            raise ValueError(f"checkpoint {path!r} does not match this model/config: "
                             f"{jax.tree_util.keystr(where)} has shape {np.shape(got)} in the "
                             f"checkpoint but {np.shape(want)} here")
    return restored
