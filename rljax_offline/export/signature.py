"""What an exported step takes and returns, leaf by leaf (`jax.ShapeDtypeStruct`s with a
symbolic batch), and the JSON sidecar that tells a deployer without this package what to
feed: every input and output with its shape and dtype, the state's zeros, what `t` means."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.connectors.core import Spaces
from rljax_offline.export.step import (
    ExportError,
    PolicyParts,
    StepLayout,
    greedy_policy_fn,
    step_layout,
    step_state,
)

SIGNATURE_SUFFIX = ".json"


def _narrow(dtype: Any) -> np.dtype:
    """JAX computes in 32 bits unless x64 is on: int64 -> int32, float64 -> float32."""
    dtype = np.dtype(dtype)
    if jax.config.jax_enable_x64 or dtype.itemsize < 8:
        return dtype
    return np.dtype({"i": np.int32, "u": np.uint32, "f": np.float32}.get(dtype.kind, dtype))


def _batch_dim(batch: Any):
    return jax.export.symbolic_shape(batch)[0] if isinstance(batch, str) else batch


def observation_signature(spaces: Spaces, batch: Any = "B", lookback: int = 0) -> Any:
    """`jax.ShapeDtypeStruct`s of a batch of raw observations.

    Args:
      spaces: the env's spaces (only the observation space is read).
      batch: the batch size, symbolic ("B") by default.
      lookback: past observations per env: the signature holds the last `lookback + 1`.
    """
    b = _batch_dim(batch)
    window = (lookback + 1,) if lookback else ()

    def one(shape_dtype):
        shape, dtype = shape_dtype
        return jax.ShapeDtypeStruct((b, *window, *shape), _narrow(dtype))

    return jax.tree_util.tree_map(one, sp.leaf_shapes(spaces.observation),
                                  is_leaf=lambda x: isinstance(x, tuple) and len(x) == 2
                                  and isinstance(x[1], np.dtype))


def input_signature(parts: PolicyParts, batch: Any = "B") -> Any:
    """The exported function's argument: the observations' signature, or the `inputs` dict's
    (see the package docstring).

    Args:
      parts: the policy to export.
      batch: the batch size, symbolic ("B") by default.
    """
    layout = step_layout(parts)
    b = _batch_dim(batch)  # one symbolic dimension shared by every input
    obs = observation_signature(parts.spaces, b, layout.observation_lookback)
    if not layout.takes_dict:
        return obs
    sig = {"obs": obs, "t": jax.ShapeDtypeStruct((b,), np.dtype(np.int32))}
    if layout.stateful:
        sig["state"] = jax.tree_util.tree_map(
            lambda x: jax.ShapeDtypeStruct((b, *np.shape(x)), _narrow(np.asarray(x).dtype)),
            step_state(parts.module))
    if layout.prev_actions:
        shape = tuple(parts.spaces.action.shape)
        dtype = np.dtype(jax.dtypes.canonicalize_dtype(np.dtype(parts.spaces.action.dtype)))
        sig["prev_actions"] = jax.ShapeDtypeStruct((b, *shape), dtype)
    if layout.prev_rewards:
        sig["prev_rewards"] = jax.ShapeDtypeStruct((b,), np.dtype(np.float32))
    return sig


def _named_outputs(fn: Callable, sig: Any, layout: StepLayout) -> list[tuple[str, Any]]:
    """`(name, ShapeDtypeStruct)` of each output leaf of the exported function, in order:
    `actions`, `action_dist_inputs`, `state_out.<leaf>`."""
    names = ("actions", "action_dist_inputs", *(("state_out",) if layout.stateful else ()))
    return [item for name, out in zip(names, jax.eval_shape(fn, sig))
            for item in named_leaves(name, out)]


def named_leaves(prefix: str, tree: Any) -> list[tuple[str, Any]]:
    """`(name, leaf)` for each leaf of `tree`, named by its path (`state.h`, `obs.0`)."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(prefix + "".join(f".{_key_name(k)}" for k in path), leaf) for path, leaf in leaves]


def _key_name(key: Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def flat_inputs(sig: Any, takes_dict: bool) -> list[tuple[str, Any]]:
    """`(name, leaf)` of each input leaf, in the order `jax.tree_util` flattens the argument
    (a dict's members by sorted key)."""
    if not takes_dict:
        return named_leaves("obs", sig)
    return [item for name in sorted(sig) for item in named_leaves(name, sig[name])]


def _describe(named: list[tuple[str, Any]]) -> list[dict]:
    def dim(d):
        return d if isinstance(d, int) else str(d)

    return [{"name": name, "shape": [dim(d) for d in leaf.shape], "dtype": str(leaf.dtype)}
            for name, leaf in named]


class Step(NamedTuple):
    """The function to export with what describes it, each made once per export: what it
    reads, its argument's signature, its output leaves `(name, ShapeDtypeStruct)`."""

    fn: Callable
    layout: StepLayout
    inputs: Any
    outputs: list


def prepare(parts: PolicyParts) -> Step:
    layout, sig, fn = step_layout(parts), input_signature(parts), greedy_policy_fn(parts)
    return Step(fn, layout, sig, _named_outputs(fn, sig, layout))


def signature(parts: PolicyParts, format: str = "stablehlo") -> dict:
    """What the sidecar says: every input and output (name, shape with `"B"`, dtype), the
    state's zeros to start from, and what `t` means (JSON-able).

    Args:
      parts: the policy to export.
      format: the export format the sidecar describes ("stablehlo" or "onnx").
    """
    return signature_of(prepare(parts), format)


def signature_of(step: Step, format: str) -> dict:
    layout, sig = step.layout, step.inputs
    doc = {"format": format, "call": "step(inputs)" if layout.takes_dict else "act(obs)",
           "observation_lookback": layout.observation_lookback,
           "inputs": _describe(flat_inputs(sig, layout.takes_dict)),
           "outputs": _describe(step.outputs)}
    if layout.takes_dict:
        doc["t"] = ("steps since the env's reset, 0 at the reset observation; where t == 0 "
                    "the state, previous action/reward and past observations given are "
                    "ignored (the policy's initial state and zeros are used)")
    if layout.stateful:
        doc["initial_state"] = {"fill": 0.0, "leaves": _describe(named_leaves(
            "state", sig["state"]))}
    return doc


def initial_state(path: str, batch_size: int) -> dict:
    """The recurrent state to start `batch_size` envs from, zeros as the sidecar of the
    export at `path` describes (`{"h": [B, cell], ...}`), in numpy.

    Args:
      path: the exported file (its sidecar `<path>.json` is read).
      batch_size: how many envs step together.
    """
    with open(signature_path(path)) as f:
        doc = json.load(f)
    if "initial_state" not in doc:
        raise ExportError(f"{path!r} is the export of a policy without recurrent state")
    out: dict = {}
    for leaf in doc["initial_state"]["leaves"]:
        keys = leaf["name"].split(".")[1:]
        node = out
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        shape = [batch_size if d == "B" else d for d in leaf["shape"]]
        node[keys[-1]] = np.full(shape, doc["initial_state"]["fill"], leaf["dtype"])
    return out


def signature_path(path: str) -> str:
    """Where the sidecar of the export at `path` is (`<path>.json`).

    Args:
      path: the exported file.
    """
    return os.fspath(path) + SIGNATURE_SUFFIX
