"""Trained policies as standalone graphs: StableHLO (`jax.export`) and ONNX (jax2onnx).

The exported function is one greedy acting step of our own actor (`acting.actor.make_actor`),
with nothing left to Python: the env-to-module pipeline (flatten, one-hot, frame stacking,
previous action/reward, filters with their frozen statistics), the policy network, the greedy
action of its distribution and the module-to-env pipeline (unsquash / clip for Box actions).
The batch size is symbolic, so one file serves any `B`. Two kinds:

* Policies of the latest observation: `act(obs[B, ...]) -> (actions[B, ...],
  action_dist_inputs[B, d])`, each observation taken as its episode's first.

* Policies that carry something from step to step (recurrent state, `lstm_use_prev_action` /
  `lstm_use_prev_reward`, pipelines that read past observations such as frame stacking):
  `step(inputs) -> (actions, action_dist_inputs[, state_out])`, `inputs` a dict of

      obs           [B, ...], or [B, lookback + 1, ...] (oldest first) for pipelines that
                    read past observations
      state         the recurrent state before this step, e.g. {"h": [B, cell], "c": ...}
                    (recurrent PPO: the actor's part only)
      prev_actions  [B, ...]: the action the env got at the previous step
      prev_rewards  [B]: the reward of the previous step
      t             [B] int32: steps since the env's reset, 0 at the reset observation

  (only the members the policy reads). Where `t == 0` the graph treats the step as an episode
  start exactly as the actor does: the policy's initial state, no previous action or reward,
  zeros for observations before the reset; the `state`, `prev_*` and past `obs` given there
  are ignored. So a deployer starts with zeros (`initial_state`), feeds `state_out` back, and
  at an env reset only sets that env's `t` to 0.

Each export writes a JSON sidecar `<path>.json` naming every input and output with its shape
(`"B"` for the batch) and dtype, the state's zeros to start from and what `t` means, so a
deployer without this package knows what to feed.

* StableHLO: `jax.export` serialization; reload with plain JAX (no `rljax_offline` needed):

      exported = jax.export.deserialize(bytearray(open("policy.stablehlo", "rb").read()))
      actions, logits = exported.call(obs)                                # stateless
      actions, logits, state = exported.call({"obs": obs, "state": state, "t": t})

* ONNX: through `jax2onnx` (optional extra `rljax-offline[onnx]`), for onnxruntime, TensorRT,
  browsers or C++: one input a leaf, named by its path (`obs`, `obs.pos`, `state.h`,
  `prev_actions`, `t`), outputs `actions`, `action_dist_inputs`, `state_out.h`, ...

Which inputs a step takes comes from the env-to-module pipeline: `prev_actions_rewards` reads
the previous action / reward (more than the previous one is an `ExportError`), `add_states`
the recurrent state, and any other piece that reads past steps is taken to read past
observations (frame stacking).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable
from importlib.metadata import version as _version
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.acting.actor import ActorState, make_actor
from rljax_offline.algorithms.ppo.config import ACTOR, CRITIC
from rljax_offline.connectors.core import Connector, Spaces
from rljax_offline.connectors.env_to_module import PREV_ACTIONS_KEY, PREV_REWARDS_KEY
from rljax_offline.errors import ExportError

FORMATS = ("stablehlo", "onnx")
SIGNATURE_SUFFIX = ".json"
_PREV_PIECE = "prev_actions_rewards"
_STATE_PIECE = "add_states"  # reads the latest `state_out`: the step's `state` input
_FLAX_RNN_NEEDS = ("shape", "arange")  # see `_plain_jax_numpy`
_JNP = {k: getattr(jnp, k) for k in _FLAX_RNN_NEEDS}  # as JAX made them


class PolicyParts(NamedTuple):
    """What every algorithm has and an exported policy needs.

    Attributes:
      policy: what the actor takes (`acting.actor.make_actor`): `apply(params, obs)` and
        `is_stateful`; a recurrent one also `forward(params, batch)` and `initial_state()`.
      params: the policy's parameters.
      env_to_module, env_to_module_state: the env-to-module pipeline and its fitted state.
      module_to_env: the module-to-env pipeline (its state is initialised from the spaces).
      spaces: the env's observation and action spaces (`Spaces` of specs).
      lookback: past steps the actor keeps at least (`episode_lookback_horizon`).
    """

    policy: Any
    params: Any
    env_to_module: Connector
    env_to_module_state: Any
    module_to_env: Connector
    spaces: Spaces
    lookback: int = 0


class StepLayout(NamedTuple):
    """What an exported step reads besides the latest observation."""

    observation_lookback: int  # past observations: `obs` is `[B, lookback + 1, ...]` when > 0
    prev_actions: bool
    prev_rewards: bool
    stateful: bool

    @property
    def takes_dict(self) -> bool:
        """Whether the step takes the `inputs` dict (anything carried between steps)."""
        return bool(self.observation_lookback or self.prev_actions or self.prev_rewards
                    or self.stateful)


def _leaf_pieces(connector: Connector, spaces: Spaces):
    """`(piece, its input spaces)` for every piece of a (nested) pipeline, in order."""
    if not connector.pieces:
        yield connector, spaces
        return
    for piece in connector.pieces:
        yield from _leaf_pieces(piece, spaces)
        spaces = piece.out_spaces(spaces)


def step_layout(parts: PolicyParts) -> StepLayout:
    """What the pipeline and policy read: `prev_actions_rewards` pieces read the previous
    action / reward (only the previous one exports), `add_states` the recurrent state, every
    other piece with a lookback past observations."""
    obs_lookback, prev_actions, prev_rewards = int(parts.lookback), False, False
    for piece, spaces in _leaf_pieces(parts.env_to_module, parts.spaces):
        if piece.name == _STATE_PIECE:
            continue
        if piece.name != _PREV_PIECE:
            obs_lookback = max(obs_lookback, int(piece.lookback))
            continue
        if piece.lookback > 1:
            raise ExportError(f"the env-to-module pipeline reads the last {piece.lookback} "
                              "actions/rewards (prev_actions_rewards); the exported step takes "
                              "only the previous one (n_prev_actions = n_prev_rewards = 1)")
        keys = getattr(piece.out_spaces(spaces).observation, "keys", ())
        prev_actions |= PREV_ACTIONS_KEY in keys
        prev_rewards |= PREV_REWARDS_KEY in keys
    return StepLayout(obs_lookback, prev_actions, prev_rewards, bool(parts.policy.is_stateful))


def _is_actor_critic(policy: Any) -> bool:
    """Whether `policy`'s state is an actor-critic module's `{"actor": .., "critic": ..}`
    (recurrent PPO): acting reads only the actor's part, so the exported step takes and
    returns only that; the critic's cell gets its initial state and, its output unused, is
    dead code in the graph."""
    if not policy.is_stateful:
        return False
    state = policy.initial_state()
    return isinstance(state, dict) and set(state) == {ACTOR, CRITIC}


def _acting_state(policy: Any) -> Any:
    """The initial state of what the exported step carries (per item, no batch axis)."""
    state = policy.initial_state()
    return state[ACTOR] if _is_actor_critic(policy) else state


def _host(tree: Any) -> Any:
    return jax.tree_util.tree_map(jnp.asarray, jax.device_get(tree))


def greedy_policy_fn(parts: PolicyParts) -> Callable:
    """The function that gets exported: one greedy step of the actor, the pipelines' states
    and the params closed over as constants. `act(obs)` for a policy of the latest
    observation, else `step(inputs)` (see the module docstring); both return
    `(actions, action_dist_inputs)`, and a recurrent one also the state after the step."""
    layout = step_layout(parts)
    params, e2m_state = _host(parts.params), _host(parts.env_to_module_state)
    actor = make_actor(parts.policy, parts.spaces, parts.env_to_module,
                       parts.module_to_env, env_to_module_state=e2m_state,
                       lookback=parts.lookback, explore=False)
    window = _window_state_fn(parts, layout, actor.window, e2m_state)

    actor_critic = _is_actor_critic(parts.policy)

    def act_on(state: ActorState):
        actions, extras, _ = actor.select_action(params, state)
        out = (actions, extras["action_dist_inputs"])
        if not layout.stateful:
            return out
        return (*out, extras["state_out"][ACTOR] if actor_critic else extras["state_out"])

    if not layout.takes_dict:
        return lambda obs: act_on(window({"obs": obs}))
    return lambda inputs: act_on(window(inputs))


def _action_shape_dtype(spaces: Spaces) -> tuple[tuple, np.dtype]:
    return tuple(spaces.action.shape), np.dtype(jax.dtypes.canonicalize_dtype(
        np.dtype(spaces.action.dtype)))


def _window_state_fn(parts: PolicyParts, layout: StepLayout, K: int, e2m_state: Any):
    """`inputs -> ActorState`: the actor's window as it holds it after `t` steps of an
    episode (`acting.actor.make_actor`'s `observe`): the observations before the reset
    zeroed, the previous action / reward / state in the last slot, `min(t, K)` real past
    steps. Window slots the policy does not read are zeros."""
    act_shape, act_dtype = _action_shape_dtype(parts.spaces)
    L = layout.observation_lookback
    critic = parts.policy.initial_state()[CRITIC] if _is_actor_critic(parts.policy) else None

    def module_state(state, n):
        """The module's whole state from the step's (the critic's initial state added)."""
        if critic is None:
            return state
        return {ACTOR: state, CRITIC: jax.tree_util.tree_map(
            lambda x: jnp.broadcast_to(jnp.asarray(x), (n, *np.shape(x))), critic)}

    def state_of(inputs: dict) -> ActorState:
        obs = inputs["obs"]
        n = jax.tree_util.tree_leaves(obs)[0].shape[0]
        if K == 0:
            return ActorState(jax.tree_util.tree_map(lambda x: x[:, None], obs), None, None,
                              (), None, jnp.zeros((n,), jnp.int32),
                              (jnp.zeros((n, *act_shape), act_dtype), ()), None, e2m_state)
        t = jnp.asarray(inputs["t"], jnp.int32)
        real = jnp.minimum(t, K)

        def obs_window(x):
            x = x[:, None] if L == 0 else x
            x = jnp.concatenate([jnp.zeros((n, K - L, *x.shape[2:]), x.dtype), x], axis=1)
            before_reset = jnp.arange(K + 1)[None, :] < (K - real)[:, None]
            return jnp.where(before_reset.reshape(*before_reset.shape, *[1] * (x.ndim - 2)),
                             jnp.zeros((), x.dtype), x)

        def last_of_window(x, shape, dtype):
            x = jnp.asarray(x, dtype).reshape(n, 1, *shape)
            return jnp.concatenate([jnp.zeros((n, K - 1, *shape), dtype), x], axis=1)

        actions = last_of_window(inputs["prev_actions"] if layout.prev_actions
                                 else jnp.zeros((n, *act_shape), act_dtype), act_shape,
                                 act_dtype)
        rewards = last_of_window(inputs["prev_rewards"] if layout.prev_rewards
                                 else jnp.zeros((n,), jnp.float32), (), jnp.float32)
        state = module_state(inputs["state"], n) if layout.stateful else ()
        states = jax.tree_util.tree_map(lambda s: last_of_window(s, s.shape[1:], s.dtype),
                                        state)
        chosen = (jnp.zeros((n, *act_shape), act_dtype),
                  jax.tree_util.tree_map(jnp.zeros_like, state))
        return ActorState(jax.tree_util.tree_map(obs_window, obs), actions, rewards, states,
                          real.astype(jnp.int32), t, chosen, None, e2m_state)

    return state_of


# ------------------------------------------------------------------------------ signatures


def _narrow(dtype: Any) -> np.dtype:
    """JAX computes in 32 bits unless x64 is on: int64 -> int32, float64 -> float32."""
    dtype = np.dtype(dtype)
    if jax.config.jax_enable_x64 or dtype.itemsize < 8:
        return dtype
    return np.dtype({"i": np.int32, "u": np.uint32, "f": np.float32}.get(dtype.kind, dtype))


def _batch_dim(batch: Any):
    return jax.export.symbolic_shape(batch)[0] if isinstance(batch, str) else batch


def observation_signature(spaces: Spaces, batch: Any = "B", lookback: int = 0) -> Any:
    """`jax.ShapeDtypeStruct`s of a batch of raw observations (`batch` symbolic by default);
    with `lookback` the last `lookback + 1` observations per env."""
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
    (see the module docstring)."""
    layout = step_layout(parts)
    b = _batch_dim(batch)  # one symbolic dimension shared by every input
    obs = observation_signature(parts.spaces, b, layout.observation_lookback)
    if not layout.takes_dict:
        return obs
    sig = {"obs": obs, "t": jax.ShapeDtypeStruct((b,), np.dtype(np.int32))}
    if layout.stateful:
        sig["state"] = jax.tree_util.tree_map(
            lambda x: jax.ShapeDtypeStruct((b, *np.shape(x)), _narrow(np.asarray(x).dtype)),
            _acting_state(parts.policy))
    if layout.prev_actions:
        shape, dtype = _action_shape_dtype(parts.spaces)
        sig["prev_actions"] = jax.ShapeDtypeStruct((b, *shape), dtype)
    if layout.prev_rewards:
        sig["prev_rewards"] = jax.ShapeDtypeStruct((b,), np.dtype(np.float32))
    return sig


def _named_outputs(fn: Callable, sig: Any, layout: StepLayout) -> list[tuple[str, Any]]:
    """`(name, ShapeDtypeStruct)` of each output leaf of the exported function, in order:
    `actions`, `action_dist_inputs`, `state_out.<leaf>`."""
    names = ("actions", "action_dist_inputs", *(("state_out",) if layout.stateful else ()))
    return [item for name, out in zip(names, jax.eval_shape(fn, sig))
            for item in _named_leaves(name, out)]


def _named_leaves(prefix: str, tree: Any) -> list[tuple[str, Any]]:
    """`(name, leaf)` for each leaf of `tree`, named by its path (`state.h`, `obs.0`)."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(prefix + "".join(f".{_key_name(k)}" for k in path), leaf) for path, leaf in leaves]


def _key_name(key: Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _flat_inputs(sig: Any, takes_dict: bool) -> list[tuple[str, Any]]:
    if not takes_dict:
        return _named_leaves("obs", sig)
    return [item for name in sorted(sig) for item in _named_leaves(name, sig[name])]


def _describe(named: list[tuple[str, Any]]) -> list[dict]:
    def dim(d):
        return d if isinstance(d, int) else str(d)

    return [{"name": name, "shape": [dim(d) for d in leaf.shape], "dtype": str(leaf.dtype)}
            for name, leaf in named]


class _Step(NamedTuple):
    """The function to export with what describes it, each made once per export: what it
    reads, its argument's signature, its output leaves `(name, ShapeDtypeStruct)`."""

    fn: Callable
    layout: StepLayout
    inputs: Any
    outputs: list


def _prepare(parts: PolicyParts) -> _Step:
    layout, sig, fn = step_layout(parts), input_signature(parts), greedy_policy_fn(parts)
    return _Step(fn, layout, sig, _named_outputs(fn, sig, layout))


def signature(parts: PolicyParts, format: str = "stablehlo") -> dict:
    """What the sidecar says: every input and output (name, shape with `"B"`, dtype), the
    state's zeros to start from, and what `t` means (JSON-able)."""
    return _signature_of(_prepare(parts), format)


def _signature_of(step: _Step, format: str) -> dict:
    layout, sig = step.layout, step.inputs
    doc = {"format": format, "call": "step(inputs)" if layout.takes_dict else "act(obs)",
           "observation_lookback": layout.observation_lookback,
           "inputs": _describe(_flat_inputs(sig, layout.takes_dict)),
           "outputs": _describe(step.outputs)}
    if layout.takes_dict:
        doc["t"] = ("steps since the env's reset, 0 at the reset observation; where t == 0 "
                    "the state, previous action/reward and past observations given are "
                    "ignored (the policy's initial state and zeros are used)")
    if layout.stateful:
        doc["initial_state"] = {"fill": 0.0, "leaves": _describe(_named_leaves(
            "state", sig["state"]))}
    return doc


def initial_state(path: str, batch_size: int) -> dict:
    """The recurrent state to start `batch_size` envs from, zeros as the sidecar of the
    export at `path` describes (`{"h": [B, cell], ...}`), in numpy."""
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
    """Where the sidecar of the export at `path` is."""
    return os.fspath(path) + SIGNATURE_SUFFIX


# ------------------------------------------------------------------------------ formats


def export_stablehlo(parts: PolicyParts, path: str) -> str:
    """Writes the serialized `jax.export.Exported` of the greedy policy to `path`."""
    return _write_stablehlo(_prepare(parts), path)


def _write_stablehlo(step: _Step, path: str) -> str:
    exported = jax.export.export(jax.jit(step.fn))(step.inputs)
    return _write_atomic(path, exported.serialize())


def load_stablehlo(path: str) -> Callable:
    """The exported policy as a callable (plain JAX): `obs -> (actions, action_dist_inputs)`,
    or for a policy that carries state `inputs -> (actions, action_dist_inputs[, state])`."""
    with open(path, "rb") as f:
        return jax.export.deserialize(bytearray(f.read())).call


def export_onnx(parts: PolicyParts, path: str, *, opset: int = 17) -> str:
    """Writes the greedy policy as an ONNX model through jax2onnx: one input a leaf of the
    argument, named by its path (`obs`, `obs.pos`, `state.h`, `t`), outputs `actions`,
    `action_dist_inputs` and for recurrent policies `state_out.<leaf>`."""
    return _write_onnx(_prepare(parts), path, opset)


def _write_onnx(step: _Step, path: str, opset: int = 17) -> str:
    try:
        from jax2onnx import to_onnx
    except ImportError:
        raise ImportError('ONNX export needs jax2onnx: pip install "rljax-offline[onnx]"') from None
    flat = _flat_inputs(step.inputs, step.layout.takes_dict)
    _, treedef = jax.tree_util.tree_flatten(step.inputs)
    # `_flat_inputs` orders a dict's members as jax.tree_util does (sorted keys).
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
    """Exports the greedy policy to `path` as `format` ("stablehlo" or "onnx"), and its
    signature to `<path>.json`."""
    if format not in FORMATS:
        raise ExportError(f"format must be one of {FORMATS}, got {format!r}")
    step = _prepare(parts)
    doc = _signature_of(step, format)
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
