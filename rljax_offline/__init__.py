"""rljax_offline: RLlib's offline RL stack (episodes, connectors, Parquet data, BC, MARWIL,
CQL, IQL, PPO) in JAX.

The public names are all importable from here. Episodes, batches and spaces load eagerly (they
are light); the rest (algorithms, data I/O, runners, export, logging) load on first use, so
`import rljax_offline` stays fast and optional extras are only needed when used.
"""

from __future__ import annotations

import importlib

from rljax_offline import registry as _registry
from rljax_offline.episode.batch import EpisodeBatch, EpisodeMeta, bucket_length
from rljax_offline.episode.builder import EpisodeBuilder
from rljax_offline.episode.episode import Episode, EpisodeError
from rljax_offline.spaces import SpaceError, space_from_dict, space_to_dict, to_space, to_spec

__version__ = "0.1.0"

# name -> module that defines it (or (module, attribute)), imported on first access.
_LAZY = {
    # algorithms
    "Algorithm": "rljax_offline.algorithms.algorithm",
    "AlgorithmConfig": "rljax_offline.algorithms.config",
    "ConfigError": "rljax_offline.errors",
    "DefaultModelConfig": "rljax_offline.models.model_config",
    "register_algorithm": ("rljax_offline.registry", "register"),
    "run_training": "rljax_offline.apps.training_loop",
    # connectors
    "Connector": "rljax_offline.connectors.core",
    "Context": "rljax_offline.connectors.core",
    "Spaces": "rljax_offline.connectors.core",
    "pipeline": "rljax_offline.connectors.core",
    # acting
    "EnvRunner": "rljax_offline.acting.env_runner",
    "ActorPolicy": "rljax_offline.acting.actor",
    "make_actor": "rljax_offline.acting.actor",
    "record_expert": "rljax_offline.acting.env_runner",
    "record_policy": "rljax_offline.acting.recording",
    # data: readers, writers, conversions
    "OfflineDataError": "rljax_offline.errors",
    "SkipReport": "rljax_offline.data.reader",
    "iter_episodes": "rljax_offline.data.reader",
    "read_episodes": "rljax_offline.data.reader",
    "EpisodeWriter": "rljax_offline.data.writer",
    "write_episodes": "rljax_offline.data.writer",
    "convert_dataset": "rljax_offline.data.convert",
    "inspect_dataset": "rljax_offline.data.inspect",
    "episodes_to_tabular": "rljax_offline.data.convert",
    "tabular_to_episodes": "rljax_offline.data.convert",
    "read_sample_batch_json": "rljax_offline.data.sample_batch_json",
    "sample_timesteps": "rljax_offline.data.stream",
    "iter_minari_episodes": "rljax_offline.data.minari",
    "write_minari": "rljax_offline.data.minari",
    # export and logging
    "ExportError": "rljax_offline.export",
    "PolicyParts": "rljax_offline.export",
    "export_policy": "rljax_offline.export",
    "load_stablehlo": "rljax_offline.export",
    "default_logger": "rljax_offline.apps.reporting",
    # every built-in algorithm's config class (BCConfig, ...), as the registry lists them
    **_registry.builtin_config_classes(),
}

__all__ = [  # every public name; tests/test_public_api.py checks each resolves
    "ActorPolicy",
    "Algorithm",
    "AlgorithmConfig",
    "ConfigError",
    "Connector",
    "Context",
    "DefaultModelConfig",
    "EnvRunner",
    "Episode",
    "EpisodeBatch",
    "EpisodeBuilder",
    "EpisodeError",
    "EpisodeMeta",
    "EpisodeWriter",
    "ExportError",
    "OfflineDataError",
    "PolicyParts",
    "SkipReport",
    "SpaceError",
    "Spaces",
    "bucket_length",
    "convert_dataset",
    "default_logger",
    "episodes_to_tabular",
    "export_policy",
    "inspect_dataset",
    "iter_episodes",
    "iter_minari_episodes",
    "load_stablehlo",
    "make_actor",
    "pipeline",
    "read_episodes",
    "read_sample_batch_json",
    "record_expert",
    "record_policy",
    "register_algorithm",
    "run_training",
    "sample_timesteps",
    "space_from_dict",
    "space_to_dict",
    "tabular_to_episodes",
    "to_space",
    "to_spec",
    "write_episodes",
    "write_minari",
]
__all__ += sorted(_registry.builtin_config_classes())  # BCConfig, ...: from the registry


def __getattr__(name: str):
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'rljax_offline' has no attribute {name!r}")
    module, attr = where if isinstance(where, tuple) else (where, name)
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
