"""Algorithm layer: `AlgorithmConfig` (RLlib's config groups), the generic `Algorithm`, and
the registry from algorithm name to config class."""

from rljax_offline.algorithms.config import AlgorithmConfig, ConfigError
from rljax_offline.algorithms.registry import config_class, names, register

__all__ = ["AlgorithmConfig", "ConfigError", "config_class", "names", "register"]
