"""`rljax-offline inspect`: a data set's episodes, timesteps, returns and schema; for
multi-agent data also one summary per module and per agent."""

from __future__ import annotations

from rljax_offline.cli.args import add_read_options, input_of, read_kwargs
from rljax_offline.cli.output import add_command, emit
from rljax_offline.errors import UsageError


def run(args) -> int:
    # start-up: the data package (pyarrow) and data.minari cost ~50 ms on top of
    # `import rljax_offline.cli`; only `inspect` needs them (measured 2026-11-24).
    from rljax_offline.data import inspect_dataset
    from rljax_offline.data.minari import is_minari_input, minari_summary
    from rljax_offline.data.multi_agent_inspect import (
        inspect_multi_agent,
        inspect_multi_agent_tabular,
        is_multi_agent_dataset,
        multi_agent_tabular_files,
    )

    source = input_of(args)
    if is_minari_input(source):
        summary = minari_summary(source)
    elif is_multi_agent_dataset(source):
        if args.on_bad_file == "skip" or args.schema is not None:
            raise UsageError("multi-agent data is read as written: --on-bad-file skip and "
                             "--schema apply to single-agent data")
        summary = inspect_multi_agent(source)
    elif ma_tabular := multi_agent_tabular_files(args.input):
        summary = inspect_multi_agent_tabular(ma_tabular)
    else:
        summary = inspect_dataset(args.input, **read_kwargs(args))
    emit({"command": "inspect", **summary})
    return 0


def register(sub) -> None:
    """Adds `inspect` and its flags to the subcommands `sub`."""
    p = add_command(
        sub, "inspect", "summarize a data set: episodes, timesteps, returns, schema",
        "  rljax-offline inspect --input data/cartpole\n"
        "  rljax-offline inspect --input minari:cartpole/expert-v0", run)
    p.add_argument("--input", required=True, nargs="+",
                   help="Parquet files/folders/globs/URIs (multi-agent too) or "
                        "minari:DATASET_ID")
    add_read_options(p)
