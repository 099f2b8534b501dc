"""`rljax-offline`: record, train, evaluate, convert, inspect, export, demo: offline RL data
and offline algorithms from the command line (`python -m rljax_offline.cli` is the same).

Every command prints progress on long work and its results as JSON lines on stdout, so runs
can be piped into `jq` or a log; `train` and `demo` also save a learning-curve PNG, and `train`
writes TensorBoard events under its `--out`.

Failures never print a traceback: one line `error: ...` on stderr, exit code 2 for a usage
error (a bad flag or value), 1 for bad data, a damaged checkpoint or a diverged run
(`RLJAX_DEBUG=1` re-raises, for bug reports).

One module a command (`record`, `train`, ...: its `register(sub)` adds the subcommand and its
flags, its `run(args)` does the work); `args` holds the argument types and shared option
groups, `output` the JSON-lines output and help formatting, `main` the parser and exit codes.
"""

from rljax_offline.cli.main import build_parser, help_reference, main
from rljax_offline.errors import UsageError

__all__ = ["UsageError", "build_parser", "help_reference", "main"]
