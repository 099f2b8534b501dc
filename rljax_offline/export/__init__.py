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

Which inputs a step takes comes from the env-to-module pipeline, by its pieces' declared
roles (`acting.window.window_reads`): a "prev_actions_rewards" piece reads the previous action /
reward (more than the previous one is an `ExportError`), a "states" piece the recurrent state,
and any other piece that reads past steps is taken to read past observations (frame stacking).
The window those inputs fill is laid out by the actor itself (`Actor.state_at`).

Files: `step.py` (the function exported and what it reads), `signature.py` (its inputs,
outputs and the sidecar), `formats.py` (StableHLO, ONNX, `export_policy`).
"""

from rljax_offline.export.formats import (
    FORMATS,
    export_onnx,
    export_policy,
    export_stablehlo,
    load_stablehlo,
)
from rljax_offline.export.signature import (
    SIGNATURE_SUFFIX,
    initial_state,
    input_signature,
    observation_signature,
    signature,
    signature_path,
)
from rljax_offline.export.step import (
    ExportError,
    PolicyParts,
    StepLayout,
    greedy_policy_fn,
    policy_parts,
    step_layout,
)

__all__ = [
    "FORMATS", "SIGNATURE_SUFFIX", "ExportError", "PolicyParts", "StepLayout", "export_onnx",
    "export_policy", "export_stablehlo", "greedy_policy_fn", "initial_state", "input_signature",
    "load_stablehlo", "observation_signature", "policy_parts", "signature", "signature_path",
    "step_layout",
]
