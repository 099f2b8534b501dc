"""What a command prints: its results as JSON lines on stdout, and the help formatting."""

from __future__ import annotations

import argparse
import json


def emit(record: dict) -> None:
    """One JSON line on stdout, flushed (so `jq` or a log sees it at once)."""
    print(json.dumps(record, default=float), flush=True)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter,
                    argparse.RawDescriptionHelpFormatter):
    """Shows every flag's default (where it has one worth showing) and keeps the examples'
    line breaks."""

    def _get_help_string(self, action):
        if action.required or any(action.default is v for v in (None, False,
                                                                argparse.SUPPRESS)):
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """Usage errors as one line `error: ...` and exit code 2 (no usage dump)."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see --help)\n")


def add_command(sub, name: str, help: str, examples: str, run) -> argparse.ArgumentParser:
    """Adds subcommand `name` whose `run(args) -> exit code` does the work."""
    p = sub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".",
                       epilog="examples:\n" + examples, formatter_class=HelpFormatter)
    p.set_defaults(func=run)
    return p
