"""`rljax-offline`: record, train, evaluate, convert, inspect, demo.

Every command prints progress on long work and its results as JSON lines on stdout, so runs
can be piped into `jq` or a log; `train` and `demo` also save a learning-curve PNG.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _emit(record: dict) -> None:
    print(json.dumps(record, default=float), flush=True)


def _add_read_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tabular", action="store_true",
                   help="the input is in tabular rows (one timestep a row), not episode rows")
    p.add_argument("--schema", type=json.loads, default=None, metavar="JSON",
                   help='input_read_schema mapping, e.g. \'{"obs": "o_t", "actions": "a_t"}\'')
    p.add_argument("--on-bad-file", choices=["raise", "skip"], default="raise")


def _read_kwargs(args) -> dict:
    return dict(input_read_episodes=not args.tabular, input_read_schema=args.schema,
                on_bad_file=args.on_bad_file)


# ---------------------------------------------------------------------- commands


def cmd_record(args) -> int:
    from rljax_offline.runners.env_runner import record_expert

    t0 = time.perf_counter()
    files = record_expert(args.env, args.output, num_episodes=args.episodes, seed=args.seed,
                          output_write_episodes=not args.tabular,
                          output_max_rows_per_file=args.max_rows_per_file,
                          num_envs=args.num_envs)
    _emit({"command": "record", "env": args.env, "output": args.output,
           "episodes": args.episodes, "files": len(files),
           "seconds": round(time.perf_counter() - t0, 2)})
    return 0


def _config_from_args(args):
    from rljax_offline.algorithms import config_class

    config = config_class(args.algo)()
    training = {k: v for k, v in vars(args).items() if k.startswith("algo__")}
    training = {k[len("algo__"):]: v for k, v in training.items()}
    if args.lr is not None:
        training["lr"] = args.lr
    return (config
            .environment(args.env)
            .offline_data(input_=args.input, **_read_kwargs(args))
            .training(train_batch_size_per_learner=args.batch_size,
                      num_updates_per_iteration=args.updates_per_iteration, **training)
            .learners(num_devices=args.num_devices, **_distributed_kwargs(args))
            .evaluation(evaluation_interval=args.eval_interval,
                        evaluation_duration=args.eval_episodes)
            .rl_module(model_config={"fcnet_hiddens": args.hiddens})
            .debugging(seed=args.seed))


def _distributed_kwargs(args) -> dict:
    """The multi-host flags that were given (the rest stay None: JAX's environment then)."""
    keys = ("coordinator_address", "num_processes", "process_id")
    out = {k: getattr(args, k) for k in keys if getattr(args, k) is not None}
    if args.heartbeat_timeout is not None:
        out["distributed_heartbeat_timeout_s"] = args.heartbeat_timeout
    if args.initialization_timeout is not None:
        out["distributed_initialization_timeout_s"] = args.initialization_timeout
    return out


def cmd_train(args) -> int:
    from rljax_offline.training_loop import run_training

    summary = run_training(_config_from_args(args), iterations=args.iterations,
                           stop_return=args.stop_return, out_dir=args.out,
                           progress=not args.quiet, emit=_emit)
    _emit({"command": "train", "algo": args.algo, **summary})
    return 0


def _add_algorithm_options(p: argparse.ArgumentParser, algo: str) -> None:
    """One flag per training option the algorithm adds to the base config (`--beta`,
    `--min-q-weight`, ...), with its doc and default; left out, the config's default holds."""
    from rljax_offline.algorithms import AlgorithmConfig, config_class

    cls = config_class(algo)
    base = {f.name for f in AlgorithmConfig.options("training")}
    group = p.add_argument_group(f"{algo} options")
    for f in cls.options("training"):
        if f.name in base:
            continue
        default = cls.__dataclass_fields__[f.name].default
        kind = {bool: _parse_bool, int: int, float: float}.get(type(default), float)
        group.add_argument(f"--{f.name.rstrip('_').replace('_', '-')}", dest=f"algo__{f.name}",
                           type=kind, default=argparse.SUPPRESS, metavar=type(default).__name__
                           if default is not None else "VALUE",
                           help=f"{f.metadata['doc']} (default: {default})")


def _parse_bool(text: str) -> bool:
    low = text.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def cmd_evaluate(args) -> int:
    from rljax_offline.algorithms.algorithm import Algorithm

    algo = Algorithm.from_checkpoint(args.checkpoint)
    result = algo.evaluate(num_episodes=args.episodes)
    _emit({"command": "evaluate", "checkpoint": args.checkpoint, **result})
    return 0


def cmd_convert(args) -> int:
    from rljax_offline.data import convert_dataset

    files = convert_dataset(args.input, args.output, to=args.to,
                            input_read_schema=args.schema,
                            output_max_rows_per_file=args.max_rows_per_file)
    _emit({"command": "convert", "to": args.to, "output": args.output, "files": len(files)})
    return 0


def cmd_inspect(args) -> int:
    from rljax_offline.data import inspect_dataset

    _emit({"command": "inspect", **inspect_dataset(args.input, **_read_kwargs(args))})
    return 0


def cmd_demo(args) -> int:
    from rljax_offline.demo import run_demo

    run_demo(out_dir=args.out, num_episodes=args.episodes, seed=args.seed,
             progress=not args.quiet, emit=_emit)
    return 0


# ---------------------------------------------------------------------- parser


def build_parser(algo: str = "bc") -> argparse.ArgumentParser:
    """The CLI; `train`'s algorithm-specific flags are those of `algo`."""
    from rljax_offline.algorithms import names
    ap = argparse.ArgumentParser(prog="rljax-offline", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("record", help="record expert episodes to Parquet")
    p.add_argument("--env", default="CartPole-v1", choices=["CartPole-v1", "Pendulum-v1"])
    p.add_argument("--output", required=True)
    p.add_argument("--episodes", type=int, default=500)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--tabular", action="store_true", help="write tabular rows")
    p.add_argument("--max-rows-per-file", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_record)

    p = sub.add_parser("train", help="train an offline algorithm (BC, MARWIL, CQL, IQL) "
                       "from Parquet data")
    p.add_argument("--algo", default="bc", choices=names(),
                   help="the algorithm; `train --algo NAME --help` lists its own options")
    p.add_argument("--input", required=True, nargs="+")
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--iterations", type=int, default=50)
    p.add_argument("--stop-return", type=float, default=None,
                   help="stop once the evaluation return mean reaches this")
    p.add_argument("--lr", type=float, default=None,
                   help="learning rate (default: the algorithm's)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--updates-per-iteration", type=int, default=100)
    p.add_argument("--hiddens", type=int, nargs="+", default=[256, 256])
    p.add_argument("--num-devices", default="all",
                   type=lambda s: s if s == "all" else int(s))
    p.add_argument("--eval-interval", type=int, default=1)
    p.add_argument("--eval-episodes", type=int, default=5)
    p.add_argument("--out", default="rljax_runs/run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    multi = p.add_argument_group(
        "multi-host (jax.distributed; left out: JAX_COORDINATOR_ADDRESS and the cluster's "
        "environment, as jax.distributed.initialize reads them)")
    multi.add_argument("--coordinator-address", default=None, metavar="HOST:PORT",
                       help="process 0's address; every process passes the same")
    multi.add_argument("--num-processes", type=int, default=None, metavar="N")
    multi.add_argument("--process-id", type=int, default=None, metavar="I",
                       help="this process, 0 to N-1; process 0 writes --out")
    multi.add_argument("--heartbeat-timeout", type=int, default=None, metavar="SECONDS",
                       help="a peer silent this long is dead: the others end with an error "
                            "(default 10)")
    multi.add_argument("--initialization-timeout", type=int, default=None, metavar="SECONDS",
                       help="how long to wait for every process to join (default 60)")
    _add_read_options(p)
    _add_algorithm_options(p, algo)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("evaluate", help="evaluate a saved checkpoint in its env")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--episodes", type=int, default=10)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("convert", help="tabular <-> episodes, SampleBatch JSON -> episodes")
    p.add_argument("--input", required=True, nargs="+")
    p.add_argument("--output", required=True)
    p.add_argument("--to", choices=["episodes", "tabular"], required=True)
    p.add_argument("--schema", type=json.loads, default=None, metavar="JSON")
    p.add_argument("--max-rows-per-file", type=int, default=None)
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("inspect", help="episodes, timesteps, return stats and schema")
    p.add_argument("--input", required=True, nargs="+")
    _add_read_options(p)
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("demo", help="record expert CartPole, train BC, evaluate, plot")
    p.add_argument("--out", default="demo_output")
    p.add_argument("--episodes", type=int, default=500)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_demo)
    return ap


def _algo_of(argv: list[str]) -> str:
    """The `--algo` value of a `train` command line (before the full parse), default bc."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--algo", default="bc")
    algo = pre.parse_known_args(argv)[0].algo
    from rljax_offline.algorithms import names

    return algo if algo in names() else "bc"  # an unknown name fails in the full parse


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(_algo_of(argv)).parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, KeyError) as e:
        print(f"rljax-offline {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
