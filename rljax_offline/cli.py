"""`rljax-offline`: record, train, evaluate, convert, inspect, demo.

Every command prints progress on long work and its results as JSON lines on stdout, so runs
can be piped into `jq` or a log; `train` and `demo` also save a learning-curve PNG.

Failures never print a traceback: one line `error: ...` on stderr, exit code 2 for a usage
error (a bad flag or value), 1 for bad data, a damaged checkpoint or a diverged run
(`RLJAX_DEBUG=1` re-raises, for bug reports).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

#: Largest train batch accepted on the command line (timesteps): beyond this the batch of a
#: small model alone needs gigabytes; lower it or use the Python API deliberately.
MAX_BATCH_SIZE = 1 << 22


# ---------------------------------------------------------------------- argument types


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def batch_size(text: str) -> int:
    value = positive_int(text)
    if value > MAX_BATCH_SIZE:
        raise argparse.ArgumentTypeError(
            f"{value} timesteps a batch would not fit in accelerator memory for any model "
            f"this CLI builds (limit {MAX_BATCH_SIZE}); use a smaller batch")
    return value


def json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise argparse.ArgumentTypeError(f"not valid JSON ({e}): {text[:80]!r}") from None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise argparse.ArgumentTypeError(
            'expected a JSON object of column names, e.g. \'{"obs": "o_t"}\'')
    return value


def device_count(text: str):
    return text if text == "all" else positive_int(text)


def env_id(text: str) -> str:
    import gymnasium as gym

    try:
        gym.spec(text)
    except Exception:  # noqa: BLE001 - gymnasium raises several error types for unknown ids
        raise argparse.ArgumentTypeError(f"unknown gymnasium env id {text!r}") from None
    return text


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line `error: ...` and exit code 2 (no usage dump)."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see --help)\n")


def _emit(record: dict) -> None:
    print(json.dumps(record, default=float), flush=True)


def _add_read_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tabular", action="store_true",
                   help="the input is in tabular rows (one timestep a row), not episode rows")
    p.add_argument("--schema", type=json_object, default=None, metavar="JSON",
                   help='input_read_schema mapping, e.g. \'{"obs": "o_t", "actions": "a_t"}\'')
    p.add_argument("--on-bad-file", choices=["raise", "skip"], default="raise")


def _read_kwargs(args) -> dict:
    return dict(input_read_episodes=not args.tabular, input_read_schema=args.schema,
                on_bad_file=args.on_bad_file)


# ---------------------------------------------------------------------- commands


def cmd_record(args) -> int:
    from rljax_offline.data.errors import OutputExistsError
    from rljax_offline.runners.env_runner import record_expert

    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise OutputExistsError(f"--output {args.output!r} is an existing file; record writes "
                                "a folder of Parquet files (an existing folder is added to)")

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
    from rljax_offline.config import BCConfig

    return (BCConfig()
            .environment(args.env)
            .offline_data(input_=args.input, **_read_kwargs(args))
            .training(lr=args.lr, train_batch_size_per_learner=args.batch_size,
                      num_updates_per_iteration=args.updates_per_iteration)
            .learners(num_devices=args.num_devices)
            .evaluation(evaluation_interval=args.eval_interval,
                        evaluation_duration=args.eval_episodes)
            .rl_module(model_config={"fcnet_hiddens": args.hiddens})
            .debugging(seed=args.seed))


def cmd_train(args) -> int:
    from rljax_offline.training_loop import run_training

    summary = run_training(_config_from_args(args), iterations=args.iterations,
                           stop_return=args.stop_return, out_dir=args.out,
                           progress=not args.quiet, emit=_emit)
    _emit({"command": "train", **summary})
    return 0


def cmd_evaluate(args) -> int:
    from rljax_offline.algorithm import BC

    algo = BC.from_checkpoint(args.checkpoint)
    result = algo.evaluate(num_episodes=args.episodes)
    _emit({"command": "evaluate", "checkpoint": args.checkpoint, **result})
    return 0


def cmd_convert(args) -> int:
    from rljax_offline.data import SkipReport, convert_dataset

    skipped = SkipReport()
    files = convert_dataset(args.input, args.output, to=args.to,
                            input_read_schema=args.schema,
                            output_max_rows_per_file=args.max_rows_per_file,
                            on_bad_file=args.on_bad_file, skipped=skipped)
    _emit({"command": "convert", "to": args.to, "output": args.output, "files": len(files),
           "skipped_files": [list(s) for s in skipped],
           "dropped_episodes": len(skipped.dropped_episodes)})
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


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="rljax-offline", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("record", help="record expert episodes to Parquet")
    p.add_argument("--env", default="CartPole-v1", choices=["CartPole-v1", "Pendulum-v1"])
    p.add_argument("--output", required=True)
    p.add_argument("--episodes", type=positive_int, default=500)
    p.add_argument("--num-envs", type=positive_int, default=8)
    p.add_argument("--tabular", action="store_true", help="write tabular rows")
    p.add_argument("--max-rows-per-file", type=positive_int, default=None)
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.set_defaults(func=cmd_record)

    p = sub.add_parser("train", help="behavior cloning from Parquet data")
    p.add_argument("--input", required=True, nargs="+")
    p.add_argument("--env", default="CartPole-v1", type=env_id)
    p.add_argument("--iterations", type=positive_int, default=50)
    p.add_argument("--stop-return", type=finite_float, default=None,
                   help="stop once the evaluation return mean reaches this")
    p.add_argument("--lr", type=positive_float, default=1e-3)
    p.add_argument("--batch-size", type=batch_size, default=1024)
    p.add_argument("--updates-per-iteration", type=positive_int, default=100)
    p.add_argument("--hiddens", type=positive_int, nargs="+", default=[256, 256])
    p.add_argument("--num-devices", default="all", type=device_count)
    p.add_argument("--eval-interval", type=non_negative_int, default=1)
    p.add_argument("--eval-episodes", type=positive_int, default=5)
    p.add_argument("--out", default="rljax_runs/bc")
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--quiet", action="store_true")
    _add_read_options(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("evaluate", help="evaluate a saved checkpoint in its env")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--episodes", type=positive_int, default=10)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("convert", help="tabular <-> episodes, SampleBatch JSON -> episodes")
    p.add_argument("--input", required=True, nargs="+")
    p.add_argument("--output", required=True)
    p.add_argument("--to", choices=["episodes", "tabular"], required=True)
    p.add_argument("--schema", type=json_object, default=None, metavar="JSON")
    p.add_argument("--max-rows-per-file", type=positive_int, default=None)
    p.add_argument("--on-bad-file", choices=["raise", "skip"], default="raise")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("inspect", help="episodes, timesteps, return stats and schema")
    p.add_argument("--input", required=True, nargs="+")
    _add_read_options(p)
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("demo", help="record expert CartPole, train BC, evaluate, plot")
    p.add_argument("--out", default="demo_output")
    p.add_argument("--episodes", type=positive_int, default=500)
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_demo)
    return ap


def _exit_code(e: BaseException) -> int:
    """2 for usage errors (an invalid value the parser could not see), else 1."""
    from rljax_offline.config import ConfigError

    return 2 if isinstance(e, ConfigError) else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"error: rljax-offline {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the one place every failure becomes one line
        if os.environ.get("RLJAX_DEBUG"):
            raise
        from rljax_offline.data.errors import RljaxError

        text = " ".join(str(e).split()) or type(e).__name__
        if isinstance(e, MemoryError):
            text = "out of memory (use a smaller --batch-size or fewer episodes)"
        elif not isinstance(e, (RljaxError, ValueError, OSError, KeyError)):
            text = f"internal error {type(e).__name__}: {text} (rerun with RLJAX_DEBUG=1)"
        print(f"error: rljax-offline {args.command}: {text}", file=sys.stderr)
        return _exit_code(e)


if __name__ == "__main__":
    sys.exit(main())
