"""One registry from algorithm name to its config class (which names its learner and builds
its algorithm). Checkpoints record the name; `Algorithm.from_checkpoint` and the CLI's
`--algo` look it up here.

Built-ins are listed as "module:Class" strings and imported on first use, so this module
imports no algorithm module (no import cycle). Adding an algorithm is one line here, or
`register("name", MyConfig)` from user code.
"""

from __future__ import annotations

import importlib

from rljax_offline.algorithms.config import AlgorithmConfig

_BUILTIN = {
    "bc": "rljax_offline.algorithms.bc:BCConfig",
    "marwil": "rljax_offline.algorithms.marwil:MARWILConfig",
    "ppo": "rljax_offline.algorithms.ppo.config:PPOConfig",
    "cql": "rljax_offline.algorithms.cql:CQLConfig",
    "iql": "rljax_offline.algorithms.iql:IQLConfig",
    "td3_bc": "rljax_offline.algorithms.td3_bc:TD3BCConfig",
}
_REGISTERED: dict[str, type] = {}


def register(name: str, config_class: type) -> None:
    """Makes `config_class` (an `AlgorithmConfig` subclass) known as `name`."""
    if not (isinstance(config_class, type) and issubclass(config_class, AlgorithmConfig)):
        raise TypeError(f"register({name!r}, ...) needs an AlgorithmConfig subclass, got "
                        f"{config_class!r}")
    _REGISTERED[name] = config_class


def names() -> list[str]:
    """Every registered algorithm name."""
    return sorted({*_BUILTIN, *_REGISTERED})


def config_class(name: str) -> type:
    """The config class registered as `name`; a named error listing the known ones."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name not in _BUILTIN:
        raise KeyError(f"unknown algorithm {name!r}; known: {names()}")
    module, attr = _BUILTIN[name].split(":")
    return getattr(importlib.import_module(module), attr)
