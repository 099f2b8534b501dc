"""`rljax-offline convert`: between tabular rows, episode rows, SampleBatch JSON and Minari;
multi-agent data to per-module tabular or episode rows."""

from __future__ import annotations

from rljax_offline.cli.args import input_of, json_object, positive_int
from rljax_offline.cli.output import add_command, emit
from rljax_offline.errors import UsageError


def run(args) -> int:
    # start-up: the data package (pyarrow), data.convert and data.minari cost ~50 ms on top
    # of `import rljax_offline.cli`; only `convert` needs them (measured 2026-11-24).
    from rljax_offline.data import SkipReport
    from rljax_offline.data.convert import convert_dataset, convert_minari
    from rljax_offline.data.minari import is_minari_input
    from rljax_offline.data.multi_agent_inspect import is_multi_agent_dataset

    skipped = SkipReport()
    source = input_of(args)
    if is_multi_agent_dataset(source):
        return run_multi_agent(args, source)
    if args.to == "minari" or is_minari_input(source):
        if args.to == "minari" and not is_minari_input(args.output):
            raise UsageError(f"--to minari writes a Minari dataset: give --output as "
                             f"minari:DATASET_ID, got {args.output!r}")
        files = convert_minari(source, args.output, to=args.to, env=args.env,
                               output_max_rows_per_file=args.max_rows_per_file,
                               **({"input_read_schema": args.schema} if args.schema else {}))
    else:
        files = convert_dataset(args.input, args.output, to=args.to,
                                input_read_schema=args.schema,
                                output_max_rows_per_file=args.max_rows_per_file,
                                on_bad_file=args.on_bad_file, skipped=skipped)
    emit({"command": "convert", "to": args.to, "output": args.output, "files": len(files),
          "skipped_files": [list(s) for s in skipped],
          "dropped_episodes": len(skipped.dropped_episodes)})
    return 0


def run_multi_agent(args, source: str) -> int:
    """A multi-agent folder: one output folder per module, tabular or episode rows."""
    from rljax_offline.data.multi_agent_convert import convert_multi_agent

    if args.to == "minari" or args.schema is not None or args.env is not None:
        raise UsageError("multi-agent data converts --to tabular or --to episodes (one folder "
                         "per module), without --schema or --env")
    if args.to == "tabular" and args.max_rows_per_file is not None:
        raise UsageError("the multi-agent tabular layout writes one file per module: drop "
                         "--max-rows-per-file (it applies to --to episodes)")
    files = convert_multi_agent(source, args.output, to=args.to,
                                output_max_rows_per_file=args.max_rows_per_file)
    modules = sorted({f.rstrip("/").split("/")[-2] for f in files})
    emit({"command": "convert", "to": args.to, "output": args.output, "files": len(files),
          "modules": modules, "skipped_files": [], "dropped_episodes": 0})
    return 0


def register(sub) -> None:
    """Adds `convert` and its flags to the subcommands `sub`."""
    p = add_command(
        sub, "convert", "convert between tabular rows, episode rows, SampleBatch JSON "
        "and Minari datasets",
        "  rljax-offline convert --input data/cartpole --output data/tab --to tabular\n"
        "  rljax-offline convert --input minari:D4RL/door/human-v2 --output data/door "
        "--to episodes\n"
        "  rljax-offline convert --input data/cartpole --output minari:cartpole/bc-v0 "
        "--to minari --env CartPole-v1", run)
    p.add_argument("--input", required=True, nargs="+",
                   help="Parquet files/folders/globs, SampleBatch .json files, or "
                        "minari:DATASET_ID")
    p.add_argument("--output", required=True,
                   help="output folder, or minari:DATASET_ID with --to minari")
    p.add_argument("--to", choices=["episodes", "tabular", "minari"], required=True,
                   help="output format")
    p.add_argument("--env", default=None,
                   help="gymnasium env id recorded in a Minari output (and its spaces when "
                        "the input files carry none)")
    p.add_argument("--schema", type=json_object, default=None, metavar="JSON",
                   help="input_read_schema mapping of the input's column names")
    p.add_argument("--max-rows-per-file", type=positive_int, default=None,
                   help="rows per output Parquet file (default: one file)")
    p.add_argument("--on-bad-file", choices=["raise", "skip"], default="raise",
                   help="what to do with an unreadable input file: stop with its name, or skip "
                        "it and report it")
