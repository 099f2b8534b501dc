"""Algorithm layer: `AlgorithmConfig` (RLlib's config groups), the generic `Algorithm`, and
the registry from algorithm name to config class."""

import importlib

from rljax_offline.errors import ConfigError
from rljax_offline.registry import config_class, names, register

__all__ = ["AlgorithmConfig", "ConfigError", "config_class", "names", "register"]


def __getattr__(name: str):
    # `AlgorithmConfig` loads flax (about 0.4 s): only when asked for, so that importing the
    # registry (as `import rljax_offline` does) stays light.
    if name == "AlgorithmConfig":
        return importlib.import_module("rljax_offline.algorithms.config").AlgorithmConfig
    raise AttributeError(f"module 'rljax_offline.algorithms' has no attribute {name!r}")
