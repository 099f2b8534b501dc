"""The option declarations of `AlgorithmConfig` and its subclasses: `option(default, group,
check, doc)` declares a config field, and the checks validate a value (each returns None when
the value is fine, else what was expected, for a one-line `ConfigError`)."""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from typing import Any

GROUPS = ("api_stack", "environment", "offline_data", "training", "evaluation", "learners",
          "reporting", "checkpointing", "rl_module", "env_runners", "multi_agent", "debugging")


# A check takes the value and returns None when fine, else what was expected.


def positive_int(v) -> str | None:
    ok = isinstance(v, int) and not isinstance(v, bool) and v > 0
    return None if ok else "a positive int"


def non_negative_int(v) -> str | None:
    ok = isinstance(v, int) and not isinstance(v, bool) and v >= 0
    return None if ok else "an int >= 0"


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def positive_float(v) -> str | None:
    return None if _number(v) and v > 0 else "a finite number > 0"


def non_negative_float(v) -> str | None:
    return None if _number(v) and v >= 0 else "a finite number >= 0"


def any_float(v) -> str | None:
    return None if _number(v) else "a finite number"


def probability(v) -> str | None:
    return None if _number(v) and 0 <= v <= 1 else "a number in [0, 1]"


def unit_interval_open_left(v) -> str | None:
    return None if _number(v) and 0 < v <= 1 else "a number in (0, 1]"


def open_unit_interval(v) -> str | None:
    return None if _number(v) and 0 < v < 1 else "a number in (0, 1)"


def boolean(v) -> str | None:
    return None if isinstance(v, bool) else "True or False"


def dict_or_none(v) -> str | None:
    return None if v is None or isinstance(v, dict) else "a dict or None"


def callable_or_none(v) -> str | None:
    return None if v is None or callable(v) else "a callable or None"


def a_callable(v) -> str | None:
    return None if callable(v) else "a callable"


def str_list(v) -> str | None:
    ok = isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)
    return None if ok else "a list of column names"


def distinct_seeds(v) -> str | None:
    ok = (isinstance(v, (list, tuple)) and len(v) >= 1 and len(set(v)) == len(v)
          and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in v))
    return None if ok else "a non-empty list of distinct non-negative ints"


def non_empty_str(v) -> str | None:
    return None if isinstance(v, str) and v else "a non-empty string"


def host_port(v) -> str | None:
    ok = isinstance(v, str) and ":" in v and v.rsplit(":", 1)[1].isdigit()
    return None if ok else "a HOST:PORT string"


def module_ids(v) -> str | None:
    ok = isinstance(v, (list, tuple)) and all(isinstance(x, str) and x for x in v)
    return None if ok else "a list of module ids"


def module_policies(v) -> str | None:
    """RLlib's `policies`: module ids, each with None or a dict of config overrides."""
    ok = v is None or (isinstance(v, dict) and v and all(
        isinstance(k, str) and k and (x is None or isinstance(x, dict)) for k, x in v.items()))
    return None if ok else ("None or module ids (a set or list of str, or a dict id -> None "
                            "or a dict of config overrides)")


def one_of(*choices) -> Callable[[Any], str | None]:
    def check(v):
        return None if v in choices else f"one of {list(choices)}"
    return check


def optional(check: Callable) -> Callable[[Any], str | None]:
    def opt(v):
        return None if v is None else (None if check(v) is None else f"None or {check(v)}")
    return opt


def either(*checks) -> Callable[[Any], str | None]:
    def check(v):
        errors = [c(v) for c in checks]
        return None if None in errors else " or ".join(errors)
    return check


def option(default: Any, group: str, check: Callable | None = None, doc: str = "",
           ignored: str | None = None):
    """A config field: its default, its RLlib group, its check and a one-line doc.
    `ignored`: why an RLlib knob has no effect here (setting it warns once, in one line)."""
    if group not in GROUPS:
        raise ValueError(f"unknown config group {group!r}")
    meta = {"group": group, "check": check, "doc": doc, "ignored": ignored}
    if isinstance(default, (dict, list)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)
