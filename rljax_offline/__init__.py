"""rljax_offline: RLlib's offline RL stack (episodes, connectors, Parquet data, BC) in JAX."""

from rljax_offline.batch import EpisodeBatch, EpisodeMeta, bucket_length
from rljax_offline.config import BCConfig
from rljax_offline.episode import Episode, EpisodeError
from rljax_offline.episode_builder import EpisodeBuilder
from rljax_offline.spaces import SpaceError, space_from_dict, space_to_dict, to_space, to_spec

__version__ = "0.1.0"

__all__ = [
    "BCConfig",
    "Episode",
    "EpisodeBatch",
    "EpisodeBuilder",
    "EpisodeError",
    "EpisodeMeta",
    "SpaceError",
    "bucket_length",
    "space_from_dict",
    "space_to_dict",
    "to_space",
    "to_spec",
]


def __getattr__(name):
    # `BC` pulls in flax/optax: import it only when asked for.
    if name == "BC":
        from rljax_offline.algorithm import BC

        return BC
    raise AttributeError(f"module 'rljax_offline' has no attribute {name!r}")
