"""rljax_offline: RLlib's offline RL stack (episodes, connectors, Parquet data, BC, MARWIL,
CQL, IQL) in JAX."""

from rljax_offline.batch import EpisodeBatch, EpisodeMeta, bucket_length
from rljax_offline.episode import Episode, EpisodeError
from rljax_offline.episode_builder import EpisodeBuilder
from rljax_offline.spaces import SpaceError, space_from_dict, space_to_dict, to_space, to_spec

__version__ = "0.1.0"

# Names that pull in flax/optax are imported on first use (`import rljax_offline` stays light).
_LAZY = {
    "Algorithm": "rljax_offline.algorithms.algorithm",
    "AlgorithmConfig": "rljax_offline.algorithms.config",
    "ConfigError": "rljax_offline.algorithms.config",
    "register_algorithm": ("rljax_offline.algorithms.registry", "register"),
    "BCConfig": "rljax_offline.learners.bc",
    "MARWILConfig": "rljax_offline.learners.marwil",
    "PPOConfig": "rljax_offline.learners.ppo",
    "CQLConfig": "rljax_offline.learners.cql",
    "IQLConfig": "rljax_offline.learners.iql",
}

__all__ = [
    "Algorithm",
    "AlgorithmConfig",
    "BCConfig",
    "CQLConfig",
    "ConfigError",
    "Episode",
    "EpisodeBatch",
    "EpisodeBuilder",
    "EpisodeError",
    "EpisodeMeta",
    "IQLConfig",
    "MARWILConfig",
    "PPOConfig",
    "SpaceError",
    "bucket_length",
    "register_algorithm",
    "space_from_dict",
    "space_to_dict",
    "to_space",
    "to_spec",
]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        where = _LAZY[name]
        module, attr = where if isinstance(where, tuple) else (where, name)
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'rljax_offline' has no attribute {name!r}")
