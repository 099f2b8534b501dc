"""`rljax-offline export`: a checkpoint's greedy policy as a standalone graph."""

from __future__ import annotations

import json
import os

from rljax_offline.cli.output import add_command, emit
from rljax_offline.export import signature_path


def run(args) -> int:
    # start-up: loading a trained policy and export cost ~120 ms on top of
    # `import rljax_offline.cli`; only `export` needs them (measured 2026-11-24).
    from rljax_offline.export import export_policy, policy_parts
    from rljax_offline.learning.trained_policy import load_policy

    policy = load_policy(args.checkpoint)  # no algorithm built: its trained policy only
    path = export_policy(policy_parts(policy), args.output, args.format)
    with open(signature_path(path)) as f:
        signature = json.load(f)
    # what the graph takes, so a deployer sees at once whether it is `act(obs)` or a step
    # with state and `t` (the sidecar has the shapes)
    emit({"command": "export", "checkpoint": args.checkpoint, "format": args.format,
          "output": path, "bytes": os.path.getsize(path), "signature": signature_path(path),
          "call": signature["call"], "inputs": [i["name"] for i in signature["inputs"]],
          "outputs": [o["name"] for o in signature["outputs"]]})
    return 0


def register(sub) -> None:
    """Adds `export` and its flags to the subcommands `sub`."""
    p = add_command(
        sub, "export", "export a checkpoint's greedy policy as a standalone graph "
        "(recurrent and frame-stacking policies as one step with their state and t; "
        "the signature goes to OUTPUT.json)",
        "  rljax-offline export --checkpoint runs/bc/checkpoint --output policy.onnx "
        "--format onnx\n"
        "  rljax-offline export --checkpoint runs/bc/checkpoint --output "
        "policy.stablehlo", run)
    p.add_argument("--checkpoint", required=True, help="checkpoint folder written by train")
    p.add_argument("--format", choices=["stablehlo", "onnx"], default="stablehlo",
                   help="stablehlo: jax.export, reloads with plain JAX; onnx: for "
                        "onnxruntime and friends (needs the onnx extra)")
    p.add_argument("--output", required=True, help="file to write")
