"""The `rljax-offline` parser, assembled from one module per command, and `main`: the one
place where every failure becomes one line on stderr and an exit code."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap

from rljax_offline.cli import convert, datasets, demo, evaluate, export, inspect, record, train
from rljax_offline.cli.output import HelpFormatter, Parser
from rljax_offline.errors import ConfigError, RljaxError, UsageError

COMMANDS = (record, datasets, train, evaluate, convert, inspect, export, demo)  # in --help's order

_INPUTS = ("Data: RLlib's Parquet formats (episode rows or tabular rows) on local disk or any "
           "pyarrow filesystem, and Minari datasets as minari:DATASET_ID (found through "
           "MINARI_DATASETS_PATH as Minari does).")

REFERENCE_WIDTH = 100


def description() -> str:
    """The first paragraph of `rljax-offline --help`, naming the offline algorithms."""
    names = ", ".join(train.display_names(online=False))
    commands = ", ".join(m.__name__.rsplit(".", 1)[1] for m in COMMANDS)
    return (f"`rljax-offline`: {commands}: offline RL data\nand offline algorithms ({names}) "
            "from the command line.")


def build_parser(algo: str = train.DEFAULT_ALGO) -> argparse.ArgumentParser:
    """The CLI; `train`'s algorithm-specific flags are those of `algo`."""
    ap = Parser(
        prog="rljax-offline", formatter_class=HelpFormatter,
        description=description() + "\n\n" + textwrap.fill(_INPUTS, 79),
        epilog="Run `rljax-offline COMMAND --help` for a command's flags and examples.")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND",
                            parser_class=Parser)
    for command in COMMANDS:
        if command is train:
            train.register(sub, algo)
        else:
            command.register(sub)
    return ap


def help_reference() -> str:
    """Markdown of `rljax-offline --help` and every `COMMAND --help`, at a fixed width: the
    README's CLI reference (`scripts/update_cli_reference.py` writes it there)."""
    ap = build_parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(REFERENCE_WIDTH)
    try:
        parts = [("rljax-offline --help", ap.format_help())]
        parts += _sub_helps(sub, "rljax-offline")
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return "\n".join(f"#### `{title}`\n\n```text\n{text.rstrip()}\n```\n"
                     for title, text in parts)


def _sub_helps(sub: argparse._SubParsersAction, prefix: str) -> list[tuple[str, str]]:
    """`(title, help)` of every subcommand under `sub`, nested ones (`datasets make`) after
    their parent."""
    parts = []
    for name, p in sub.choices.items():
        parts.append((f"{prefix} {name} --help", p.format_help()))
        for inner in p._actions:
            if isinstance(inner, argparse._SubParsersAction):
                parts += _sub_helps(inner, f"{prefix} {name}")
    return parts


def exit_code(e: BaseException) -> int:
    """2 for usage errors (an invalid value the parser could not see), else 1."""
    return 2 if isinstance(e, (ConfigError, UsageError)) else 1


def main(argv: list[str] | None = None) -> int:
    """Runs one command line; returns its exit code (0 success, 1 failure, 2 usage error,
    130 interrupted). `RLJAX_DEBUG=1` re-raises instead, for bug reports."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(train.algo_of(argv)).parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"error: rljax-offline {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the one place every failure becomes one line
        if os.environ.get("RLJAX_DEBUG"):
            raise
        text = " ".join(str(e).split()) or type(e).__name__
        if isinstance(e, MemoryError):
            text = "out of memory (use a smaller --batch-size or fewer episodes)"
        elif not isinstance(e, (RljaxError, ValueError, OSError, KeyError)):
            text = f"internal error {type(e).__name__}: {text} (rerun with RLJAX_DEBUG=1)"
        print(f"error: rljax-offline {args.command}: {text}", file=sys.stderr)
        return exit_code(e)
