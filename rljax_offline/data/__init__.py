"""Offline data on Parquet: RLlib's episode and tabular formats, safe decoding, streaming."""

from rljax_offline.data.codec import decode_episode, decode_state, encode_episode, encode_state
from rljax_offline.data.convert import (
    episodes_to_tabular,
    read_sample_batch_json,
    tabular_to_episodes,
)
from rljax_offline.data.files import resolve_files
from rljax_offline.data.inspect import convert_dataset, inspect_dataset
from rljax_offline.data.reader import SkipReport, iter_episodes, read_episodes
from rljax_offline.data.stream import sample_timesteps
from rljax_offline.data.tabular import episodes_to_table, pack_compressed, unpack_compressed
from rljax_offline.data.validate import check_episode
from rljax_offline.data.writer import EpisodeWriter, write_episodes
from rljax_offline.errors import (
    CheckpointError,
    IntegrityError,
    OfflineDataError,
    OutputExistsError,
    RljaxError,
    TrainingDivergedError,
    UnsafePayloadError,
)

__all__ = [
    "CheckpointError",
    "EpisodeWriter",
    "IntegrityError",
    "OfflineDataError",
    "OutputExistsError",
    "RljaxError",
    "TrainingDivergedError",
    "UnsafePayloadError",
    "check_episode",
    "SkipReport",
    "convert_dataset",
    "decode_episode",
    "decode_state",
    "encode_episode",
    "encode_state",
    "episodes_to_table",
    "episodes_to_tabular",
    "inspect_dataset",
    "iter_episodes",
    "pack_compressed",
    "read_episodes",
    "read_sample_batch_json",
    "resolve_files",
    "sample_timesteps",
    "tabular_to_episodes",
    "unpack_compressed",
    "write_episodes",
]
