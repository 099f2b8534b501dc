"""The one registry from algorithm name to its config class (which names its learner and builds
its algorithm): the ONLY list of algorithms. A leaf module (standard library only), below
every package: a trained policy loads from a checkpoint (`learning.trained_policy`) by looking
its config class up here, without importing the algorithm layer. Checkpoints record the name;
`Algorithm.from_checkpoint`, the CLI's `--algo` choices and help, the config classes exported
by `rljax_offline` and the tests' cross-cutting algorithm cases all follow from it.

Built-ins are listed as "module:Class" strings, the class being the public config class that
`rljax_offline` exports under that name, imported on first use: this module imports no
algorithm module (no import cycle) and nothing heavy, so `import rljax_offline` stays fast.
Adding an algorithm is one line here, or `register("name", MyConfig)` from user code.
"""

from __future__ import annotations

import importlib
import sys

_BUILTIN = {
    "bc": "rljax_offline.algorithms.bc:BCConfig",
    "marwil": "rljax_offline.algorithms.marwil:MARWILConfig",
    "ppo": "rljax_offline.algorithms.ppo.config:PPOConfig",
    "cql": "rljax_offline.algorithms.cql:CQLConfig",
    "iql": "rljax_offline.algorithms.iql:IQLConfig",
    "td3_bc": "rljax_offline.algorithms.td3_bc:TD3BCConfig",
    "matd3_bc": "rljax_offline.algorithms.matd3_bc:MATD3BCConfig",
    "sac": "rljax_offline.algorithms.sac.config:SACConfig",
    "rebrac": "rljax_offline.algorithms.rebrac:ReBRACConfig",
    "awac": "rljax_offline.algorithms.awac:AWACConfig",
    "crr": "rljax_offline.algorithms.crr:CRRConfig",
    "cal_ql": "rljax_offline.algorithms.cal_ql:CalQLConfig",
    "edac": "rljax_offline.algorithms.edac:EDACConfig",
    "bcq": "rljax_offline.algorithms.bcq:BCQConfig",
    "discrete_bcq": "rljax_offline.algorithms.discrete_bcq:DiscreteBCQConfig",
    "plas": "rljax_offline.algorithms.plas:PLASConfig",
    "plas_with_perturbation": "rljax_offline.algorithms.plas:PLASWithPerturbationConfig",
    "bear": "rljax_offline.algorithms.bear:BEARConfig",
    "decision_transformer":
        "rljax_offline.algorithms.decision_transformer:DecisionTransformerConfig",
    "discrete_decision_transformer":
        "rljax_offline.algorithms.decision_transformer:DiscreteDecisionTransformerConfig",
}
_REGISTERED: dict[str, type] = {}


def register(name: str, config_class: type) -> None:
    """Makes `config_class` (an `AlgorithmConfig` subclass) known as `name`: the CLI's
    `--algo` choices, checkpoints and `from_checkpoint` then know it.

    Args:
      name: the registry name (`algo_name`).
      config_class: the `AlgorithmConfig` subclass.
    """
    # A subclass exists only once its base's module is loaded: looked up there, the check
    # needs no import of the config module (and its flax) when `rljax_offline` is imported.
    config_module = sys.modules.get("rljax_offline.algorithms.config")
    if not (isinstance(config_class, type) and config_module is not None
            and issubclass(config_class, config_module.AlgorithmConfig)):
        raise TypeError(f"register({name!r}, ...) needs an AlgorithmConfig subclass, got "
                        f"{config_class!r}")
    _REGISTERED[name] = config_class


def names() -> list[str]:
    """Every registered algorithm name."""
    return sorted({*_BUILTIN, *_REGISTERED})


def config_class(name: str) -> type:
    """The config class registered as `name`; a named error listing the known ones.

    Args:
      name: a registry name (`names()` lists them).
    """
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name not in _BUILTIN:
        raise KeyError(f"unknown algorithm {name!r}; known: {names()}")
    module, attr = _BUILTIN[name].split(":")
    return getattr(importlib.import_module(module), attr)


def display_name(name: str) -> str:
    """How help text names the algorithm: its config class's name without "Config" ("BC")."""
    return config_class(name).__name__.removesuffix("Config")


def builtin_config_classes() -> dict[str, str]:
    """{public config class name: its module} of every built-in, without importing any:
    the config classes `rljax_offline` exports."""
    return {spec.split(":")[1]: spec.split(":")[0] for spec in _BUILTIN.values()}
