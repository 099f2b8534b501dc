"""Offline data on Parquet: RLlib's episode and tabular formats, safe decoding, streaming.

`__all__` is what users and algorithm authors may import from here: reading, writing and
converting data sets (single- and multi-agent, Minari), the streams a learner draws from and
the on-device containers (`make_device_dataset`, `make_replay_buffer`). The names of the
readers and writers load with the package; the others load their module on first use, so
`import rljax_offline.data` stays as cheap as reading needs."""

import importlib

from rljax_offline.data.codec import decode_episode, decode_state, encode_episode, encode_state
from rljax_offline.data.compressed_cells import pack_compressed, unpack_compressed
from rljax_offline.data.convert import (
    convert_dataset,
    episodes_to_tabular,
    read_sample_batch_json,
    tabular_to_episodes,
)
from rljax_offline.data.files import resolve_files
from rljax_offline.data.inspect import inspect_dataset
from rljax_offline.data.reader import SkipReport, iter_episodes, read_episodes
from rljax_offline.data.stream import sample_timesteps
from rljax_offline.data.tabular import episodes_to_table
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

# public name -> the submodule that defines it, imported on first use
_LAZY = {
    "DeviceData": "device", "DeviceDataset": "device", "make_device_dataset": "device",
    "ReplayBuffer": "replay", "ReplayState": "replay", "make_replay_buffer": "replay",
    "StreamCursor": "stream", "stream_batches": "stream",
    "convert_minari": "convert", "write_minari": "minari",
    "MultiAgentEpisodeWriter": "multi_agent_io",
    "iter_multi_agent_episodes": "multi_agent_io",
    "read_multi_agent_episodes": "multi_agent_io",
    "write_multi_agent_episodes": "multi_agent_io",
    "write_multi_agent_tabular": "multi_agent_tabular",
}

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
    *sorted(_LAZY),
]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
