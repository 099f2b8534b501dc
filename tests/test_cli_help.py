"""The CLI explains itself: help on every command and flag, defaults shown, and the site's
CLI reference page (docs/reference/cli.md) is the help text itself."""

import argparse
import pathlib
import re
import subprocess
import sys

import pytest

from rljax_offline.algorithms import registry
from rljax_offline.cli import build_parser, help_reference

ROOT = pathlib.Path(__file__).resolve().parents[1]


def subcommands():
    ap = build_parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    return ap, sub


def test_every_command_and_flag_has_help():
    ap, sub = subcommands()
    helps = {c.dest: c.help for c in sub._choices_actions}
    assert set(helps) == set(sub.choices)
    for name, parser in sub.choices.items():
        assert helps[name], f"command {name!r} has no help"
        for action in parser._actions:
            assert action.help and action.help.strip(), (
                f"rljax-offline {name} {'/'.join(action.option_strings)} has no help")


@pytest.mark.parametrize("command", ["record", "train", "convert", "export", "demo"])
def test_help_shows_defaults_and_examples(command, capsys):
    _, sub = subcommands()
    text = sub.choices[command].format_help()
    assert "examples:" in text and "(default:" in text
    # Required flags and off-by-default switches show no empty "(default: None/False)".
    assert "(default: None)" not in text and "(default: False)" not in text


def test_train_help_names_its_defaults():
    """Every registered algorithm is in `train`'s help, each offline one with its own default
    batch size (read from its config class, so a new algorithm needs no edit here)."""
    _, sub = subcommands()
    text = " ".join(sub.choices["train"].format_help().split())
    groups = re.search(r"learner; default: the algorithm's, (.*?)\)", text).group(1)
    said = {name: int(size) for size, names in re.findall(r"(\d+) for (.+?)(?=, \d|$)", groups)
            for name in re.split(r", | and ", names)}
    assert f"{{{','.join(registry.names())}}}" in text  # the --algo choices
    for name in registry.names():
        cls = registry.config_class(name)
        assert registry.display_name(name) in text.split("options:")[0], name
        if not cls.trains_online:
            default = cls.__dataclass_fields__["train_batch_size_per_learner"].default
            assert said[registry.display_name(name)] == default, (name, groups)
    # the wording, on two of today's algorithms (others may share the size)
    assert re.search(r"1024 for (\w+, )*BC(, | and )MARWIL\b", text)
    assert "(default: rljax_runs/bc)" in text


def test_cli_reference_page_matches_help():
    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    assert help_reference() in page, (
        "docs/reference/cli.md is stale: run python scripts/update_cli_reference.py")


def test_update_script_check_mode_passes_on_the_checkout():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "update_cli_reference.py"),
                          "--check"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
