"""Writing an exported step: StableHLO (`jax.export`), ONNX (jax2onnx, an optional extra),
and `export_policy`, which writes either with its JSON sidecar. Every file is written
atomically (a crash leaves the old file or the new one)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable
from importlib.metadata import version as _version

import jax
import jax.numpy as jnp

from rljax_offline.export.signature import (
    Step,
    flat_inputs,
    prepare,
    signature_of,
    signature_path,
)
from rljax_offline.export.step import ExportError, PolicyParts

FORMATS = ("stablehlo", "onnx")
_FLAX_RNN_NEEDS = ("shape", "arange")  # see `_plain_jax_numpy`
_JNP = {k: getattr(jnp, k) for k in _FLAX_RNN_NEEDS}  # as JAX made them


def export_stablehlo(parts: PolicyParts, path: str) -> str:
    """Writes the serialized `jax.export.Exported` of the greedy policy to `path`.

    Args:
      parts: the policy to export (its module, params and pipelines).
      path: the file to write.

    Returns:
      `path`.
    """
    return _write_stablehlo(prepare(parts), path)


def _write_stablehlo(step: Step, path: str) -> str:
    exported = jax.export.export(jax.jit(step.fn))(step.inputs)
    return _write_atomic(path, exported.serialize())


def load_stablehlo(path: str) -> Callable:
    """The exported policy as a callable (plain JAX): `obs -> (actions, action_dist_inputs)`,
    or for a policy that carries state `inputs -> (actions, action_dist_inputs[, state])`.

    Args:
      path: a file written by `export_stablehlo` (or `export_policy`).
    """
    with open(path, "rb") as f:
        return jax.export.deserialize(bytearray(f.read())).call


def export_onnx(parts: PolicyParts, path: str, *, opset: int = 17) -> str:
    """Writes the greedy policy as an ONNX model through jax2onnx: one input a leaf of the
    argument, named by its path (`obs`, `obs.pos`, `state.h`, `t`), outputs `actions`,
    `action_dist_inputs` and for recurrent policies `state_out.<leaf>`.

    Args:
      parts: the policy to export.
      path: the file to write.
      opset: the ONNX opset version.

    Returns:
      `path`.

    Raises:
      ExportError: jax2onnx cannot convert the policy (see the export guide's limits).
    """
    return _write_onnx(prepare(parts), path, opset)


def _write_onnx(step: Step, path: str, opset: int = 17) -> str:
    try:
        from jax2onnx import to_onnx  # optional dependency: the `onnx` extra
    except ImportError:
        raise ImportError('ONNX export needs jax2onnx: pip install "rljax-offline[onnx]"') from None
    flat = flat_inputs(step.inputs, step.layout.takes_dict)
    _, treedef = jax.tree_util.tree_flatten(step.inputs)
    # `flat_inputs` orders a dict's members as jax.tree_util does (sorted keys).
    out_names = [name for name, _ in step.outputs]

    def on_leaves(*leaves):
        with _plain_jax_numpy():
            out = step.fn(jax.tree_util.tree_unflatten(treedef, leaves))
        return tuple(jax.tree_util.tree_leaves(out))

    # onnx_ir warns about untyped intermediate shape values of the converter: not ours to fix.
    ir_log = logging.getLogger("onnx_ir")
    level = ir_log.level
    ir_log.setLevel(logging.ERROR)
    try:
        model = to_onnx(on_leaves, [jax.ShapeDtypeStruct(("B", *leaf.shape[1:]), leaf.dtype)
                                    for _, leaf in flat],
                        model_name="rljax_offline_policy", opset=opset,
                        input_names=[name for name, _ in flat], output_names=out_names)
    except Exception as e:  # noqa: BLE001 - the converter raises many types for an op it lacks
        raise ExportError(f"jax2onnx {_version('jax2onnx')} cannot convert this policy: "
                          f"{type(e).__name__}: {e}; export it as format='stablehlo' "
                          "instead") from e
    finally:
        ir_log.setLevel(level)
    return _write_atomic(path, model.SerializeToString())


@contextlib.contextmanager
def _plain_jax_numpy():
    """While it converts, jax2onnx swaps some `jax.numpy` functions for shims of its own
    primitives (`jnp.shape` returns a traced array, `jnp.arange` a dynamic length); flax's
    `nn.RNN` needs their static results to build its scan (the carry's shape, the last step of
    each sequence). Those two are JAX's own while our function traces; the other shims
    stay."""
    shimmed = {k: getattr(jnp, k) for k in _FLAX_RNN_NEEDS if getattr(jnp, k) is not _JNP[k]}
    for k in shimmed:
        setattr(jnp, k, _JNP[k])
    try:
        yield
    finally:
        for k, v in shimmed.items():
            setattr(jnp, k, v)


def export_policy(parts: PolicyParts, path: str, format: str = "stablehlo") -> str:
    """Exports the greedy policy to `path` as `format`, and its signature to `<path>.json`.

    Args:
      parts: the policy to export (`Algorithm.export_policy` makes them from a trained
        algorithm).
      path: the file to write.
      format: "stablehlo" or "onnx" (`FORMATS`).

    Returns:
      `path`.

    Raises:
      ExportError: an unknown format, or a policy the format cannot express.
    """
    if format not in FORMATS:
        raise ExportError(f"format must be one of {FORMATS}, got {format!r}")
    step = prepare(parts)
    doc = signature_of(step, format)
    path = (_write_stablehlo if format == "stablehlo" else _write_onnx)(step, path)
    _write_atomic(signature_path(path), json.dumps(doc, indent=1).encode())
    return path


def _write_atomic(path: str, data: bytes) -> str:
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return path
