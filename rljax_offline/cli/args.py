"""Argument types and the option groups several commands share.

A type turns one flag's text into a value or raises `argparse.ArgumentTypeError` with a
one-line reason, so a bad value is a usage error (exit code 2) that names the flag, never a
traceback from deep inside a command.
"""

from __future__ import annotations

import argparse
import json
import math

import gymnasium as gym

from rljax_offline.envs.make import register_envs
from rljax_offline.models.policy import MODEL_CONFIG_DEFAULTS

#: Largest train batch accepted on the command line (timesteps): beyond this the batch of a
#: small model alone needs gigabytes; lower it or use the Python API deliberately.
MAX_BATCH_SIZE = 1 << 22


def _int_at_least(low: int):
    """An argparse type: a whole number >= `low`, with a one-line message otherwise."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a whole number >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return parse


positive_int = _int_at_least(1)
non_negative_int = _int_at_least(0)


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


def probability_arg(text: str) -> float:
    """A number in [0, 1] (a discount)."""
    value = finite_float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def batch_size(text: str) -> int:
    value = positive_int(text)
    if value > MAX_BATCH_SIZE:
        raise argparse.ArgumentTypeError(
            f"{value} timesteps a batch would not fit in accelerator memory for any model "
            f"this CLI builds (limit {MAX_BATCH_SIZE}); use a smaller batch")
    return value


def parse_bool(text: str) -> bool:
    low = text.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _json(text: str) -> object:
    """A flag's JSON value; invalid JSON is a usage error quoting the text."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise argparse.ArgumentTypeError(f"not valid JSON ({e}): {text[:80]!r}") from None


def json_object(text: str) -> dict:
    value = _json(text)
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise argparse.ArgumentTypeError(
            'expected a JSON object of column names, e.g. \'{"obs": "o_t"}\'')
    return value


def model_config(text: str) -> dict:
    """RLlib's model-config keys as a JSON object; unknown keys are refused by name."""
    value = _json(text)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            'expected a JSON object of model-config keys, e.g. \'{"use_lstm": true}\'')
    unknown = sorted(set(value) - set(MODEL_CONFIG_DEFAULTS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown model-config keys {unknown}; supported: "
                                         f"{sorted(MODEL_CONFIG_DEFAULTS)}")
    return value


def device_count(text: str):
    return text if text == "all" else positive_int(text)


def env_id(text: str) -> str:
    register_envs()  # our own ids (StatelessCartPole-v1) are valid on the command line
    try:
        gym.spec(text)
    except Exception:  # noqa: BLE001 - gymnasium raises several error types for unknown ids
        raise argparse.ArgumentTypeError(f"unknown gymnasium env id {text!r}") from None
    return text


# ---------------------------------------------------------------------- shared options


def add_read_options(p: argparse.ArgumentParser) -> None:
    """How the input is read: `train` and `inspect` take the same flags."""
    p.add_argument("--tabular", action="store_true",
                   help="the input is in tabular rows (one timestep a row), not episode rows")
    p.add_argument("--schema", type=json_object, default=None, metavar="JSON",
                   help='input_read_schema mapping, e.g. \'{"obs": "o_t", "actions": "a_t"}\'')
    p.add_argument("--on-bad-file", choices=["raise", "skip"], default="raise",
                   help="what to do with an unreadable file: stop with its name, or skip it "
                        "and report it")


def input_of(args):
    """One input as a string (so `minari:ID` is recognised), several as a list."""
    return args.input[0] if len(args.input) == 1 else list(args.input)


def read_kwargs(args) -> dict:
    """The reader's keyword arguments from the flags of `add_read_options`."""
    return dict(input_read_episodes=not args.tabular, input_read_schema=args.schema,
                on_bad_file=args.on_bad_file)
