"""`rljax-offline evaluate`: a checkpoint's greedy policy in its env."""

from __future__ import annotations

from rljax_offline.apps.reporting import default_logger
from rljax_offline.cli.args import positive_int
from rljax_offline.cli.output import add_command, emit


def run(args) -> int:
    # start-up: algorithms.algorithm (the facade) costs ~120 ms on top of
    # `import rljax_offline.cli`; only `evaluate` needs it here (measured 2026-11-24).
    from rljax_offline.algorithms.algorithm import Algorithm

    algo = Algorithm.from_checkpoint(args.checkpoint)
    result = algo.evaluate(num_episodes=args.episodes)
    if args.log_dir:
        with default_logger(args.log_dir, tensorboard=not args.no_tensorboard) as log:
            log.log({"evaluation": {"env_runners": result}}, step=algo.iteration)
    emit({"command": "evaluate", "checkpoint": args.checkpoint, **result})
    return 0


def register(sub) -> None:
    """Adds `evaluate` and its flags to the subcommands `sub`."""
    p = add_command(
        sub, "evaluate", "run a checkpoint's greedy policy in its env",
        "  rljax-offline evaluate --checkpoint runs/bc/checkpoint --episodes 20",
        run)
    p.add_argument("--checkpoint", required=True, help="checkpoint folder written by train")
    p.add_argument("--episodes", type=positive_int, default=10, help="episodes to run")
    p.add_argument("--log-dir", default=None,
                   help="also log the results (metrics.jsonl and TensorBoard events, at the "
                        "checkpoint's iteration) into this folder, e.g. the run's --out")
    p.add_argument("--no-tensorboard", action="store_true",
                   help="with --log-dir: JSON lines only")
