"""Trained policies as standalone graphs: StableHLO (`jax.export`) and ONNX (jax2onnx).

The exported function is the whole acting path of a trained algorithm, with nothing left to
Python: a batch of raw environment observations `[B, ...]` goes through the env-to-module
pipeline (flatten, one-hot, filters with their frozen statistics), the policy network, the
greedy action of its distribution and the module-to-env pipeline (unsquash / clip for Box
actions). It returns `(actions[B, ...], action_dist_inputs[B, d])`: the env's actions first.
The batch size is symbolic, so one file serves any `B`.

* StableHLO: `jax.export` serialization; reload with plain JAX (no `rljax_offline` needed):

      exported = jax.export.deserialize(open("policy.stablehlo", "rb").read())
      actions, logits = exported.call(obs)

* ONNX: through `jax2onnx` (optional extra `rljax-offline[onnx]`), for onnxruntime, TensorRT,
  browsers or C++.

Only pipelines that read the latest observation export (no frame stacking or recurrent state
yet): those raise a clear error.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.batch import EpisodeBatch
from rljax_offline.connectors.core import Connector, Context, Spaces

FORMATS = ("stablehlo", "onnx")


class ExportError(ValueError):
    """A policy that cannot be exported as asked (its pipeline, its spaces, the format)."""


class PolicyParts(NamedTuple):
    """What every algorithm has and an exported policy needs.

    Attributes:
      apply: the module, `(params, obs[B, ...]) -> action_dist_inputs[B, d]`.
      greedy: the distribution's greedy action, `action_dist_inputs -> actions`.
      params: the module's parameters.
      env_to_module, env_to_module_state: the env-to-module pipeline and its fitted state.
      module_to_env: the module-to-env pipeline (its state is initialised from the spaces).
      spaces: the env's observation and action spaces (`Spaces` of specs).
      lookback: past steps the env-to-module pipeline reads (only 0 exports today).
    """

    apply: Callable
    greedy: Callable
    params: Any
    env_to_module: Connector
    env_to_module_state: Any
    module_to_env: Connector
    spaces: Spaces
    lookback: int = 0


def _latest_observations(obs: Any, spaces: Spaces) -> EpisodeBatch:
    """The observations `[B, ...]` as a batch of one-observation episodes (traceable, so the
    batch size may be symbolic)."""
    n = jax.tree_util.tree_leaves(obs)[0].shape[0]
    zeros = jnp.zeros((n,), jnp.int32)
    return EpisodeBatch(
        observations=jax.tree_util.tree_map(lambda x: x[:, None], obs),
        actions=jnp.zeros((n, 0), jnp.int32), rewards=jnp.zeros((n, 0), jnp.float32),
        extra_model_outputs={}, lengths=zeros, lookback_lengths=zeros, t_started=zeros,
        terminated=jnp.zeros((n,), bool), truncated=jnp.zeros((n,), bool), max_len=0,
        len_lookback_buffer=0, observation_space_spec=spaces.observation,
        action_space_spec=spaces.action)


def greedy_policy_fn(parts: PolicyParts) -> Callable[[Any], tuple[jax.Array, jax.Array]]:
    """`obs[B, ...] -> (actions[B, ...], action_dist_inputs[B, d])`, the pipelines' states and
    the params closed over as constants: the function that gets exported."""
    if parts.lookback:
        raise ExportError(f"the env-to-module pipeline reads {parts.lookback} past steps "
                          "(frame stacking): only pipelines of the latest observation export")
    m2e_state = parts.module_to_env.init(parts.env_to_module.out_spaces(parts.spaces))
    params = jax.tree_util.tree_map(jnp.asarray, jax.device_get(parts.params))
    e2m_state = jax.tree_util.tree_map(jnp.asarray, jax.device_get(parts.env_to_module_state))
    ctx = Context(rng=None, explore=False, params=params, frozen=True)

    def act(obs):
        episodes = _latest_observations(obs, parts.spaces)
        episodes, batch, _ = parts.env_to_module.apply(e2m_state, episodes, {}, ctx)
        inputs = parts.apply(params, batch["obs"])
        batch = {**batch, "action_dist_inputs": inputs, "actions": parts.greedy(inputs)}
        _, batch, _ = parts.module_to_env.apply(m2e_state, episodes, batch, ctx)
        return batch.get("actions_for_env", batch["actions"]), inputs

    return act


def observation_signature(spaces: Spaces, batch: Any = "B") -> Any:
    """`jax.ShapeDtypeStruct`s of a batch of raw observations (`batch` symbolic by default)."""
    spec = spaces.observation
    (b,) = jax.export.symbolic_shape(batch) if isinstance(batch, str) else (batch,)
    leaves = sp.leaf_shapes(spec)

    def one(shape_dtype):
        shape, dtype = shape_dtype
        dtype = np.dtype(dtype) if jax.config.jax_enable_x64 else _narrow(dtype)
        return jax.ShapeDtypeStruct((b, *shape), dtype)

    return jax.tree_util.tree_map(one, leaves, is_leaf=lambda x: isinstance(x, tuple)
                                  and len(x) == 2 and isinstance(x[1], np.dtype))


def _narrow(dtype: Any) -> np.dtype:
    """JAX computes in 32 bits unless x64 is on: int64 -> int32, float64 -> float32."""
    dtype = np.dtype(dtype)
    if dtype.itemsize < 8:
        return dtype
    return np.dtype({"i": np.int32, "u": np.uint32, "f": np.float32}.get(dtype.kind, dtype))


def export_stablehlo(parts: PolicyParts, path: str) -> str:
    """Writes the serialized `jax.export.Exported` of the greedy policy to `path`."""
    exported = jax.export.export(jax.jit(greedy_policy_fn(parts)))(
        observation_signature(parts.spaces))
    return _write_atomic(path, exported.serialize())


def load_stablehlo(path: str) -> Callable:
    """The exported policy as a callable `obs -> (actions, action_dist_inputs)` (plain JAX)."""
    with open(path, "rb") as f:
        return jax.export.deserialize(bytearray(f.read())).call


def export_onnx(parts: PolicyParts, path: str, *, opset: int = 17) -> str:
    """Writes the greedy policy as an ONNX model through jax2onnx: input `obs` (for nested
    observation spaces one input a leaf, `obs.<key>`), outputs `actions` and
    `action_dist_inputs`."""
    try:
        from jax2onnx import to_onnx
    except ImportError:
        raise ImportError('ONNX export needs jax2onnx: pip install "rljax-offline[onnx]"') from None
    sig = observation_signature(parts.spaces)
    # ONNX inputs are flat tensors: nested (Dict/Tuple) observations become one input per
    # leaf, named after its path (`obs.pos`, `obs.0`), in the order of `jax.tree_util`.
    leaves_with_paths, treedef = jax.tree_util.tree_flatten_with_path(sig)
    names = ["obs" + "".join(f".{_key_name(k)}" for k in path) for path, _ in leaves_with_paths]
    act = greedy_policy_fn(parts)

    def act_on_leaves(*leaves):
        return act(jax.tree_util.tree_unflatten(treedef, leaves))

    # onnx_ir warns about untyped intermediate shape values of the converter: not ours to fix.
    ir_log = logging.getLogger("onnx_ir")
    level = ir_log.level
    ir_log.setLevel(logging.ERROR)
    try:
        model = to_onnx(act_on_leaves,
                        [jax.ShapeDtypeStruct(("B", *leaf.shape[1:]), leaf.dtype)
                         for _, leaf in leaves_with_paths],
                        model_name="rljax_offline_policy", opset=opset, input_names=names,
                        output_names=["actions", "action_dist_inputs"])
    finally:
        ir_log.setLevel(level)
    return _write_atomic(path, model.SerializeToString())


def _key_name(key: Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def export_policy(parts: PolicyParts, path: str, format: str = "stablehlo") -> str:
    """Exports the greedy policy to `path` as `format` ("stablehlo" or "onnx")."""
    if format not in FORMATS:
        raise ExportError(f"format must be one of {FORMATS}, got {format!r}")
    return (export_stablehlo if format == "stablehlo" else export_onnx)(parts, path)


def _write_atomic(path: str, data: bytes) -> str:
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    return path
