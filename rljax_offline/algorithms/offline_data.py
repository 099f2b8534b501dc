"""An algorithm's offline data: reading the episodes its config names, turning them into the
learner's columns with the learner pipeline, and either keeping those on the devices or
streaming them with a resumable cursor.

By default (RLlib's `materialize_data` or `materialize_mapped_data` True) the episodes are read
once, turned into learner columns by the learner pipeline (jitted, over length-bucketed
`EpisodeBatch`es) and kept on the devices (`materialize`); network-dependent columns (MARWIL's
value targets) are computed inside each update. With both False the episodes stream from the
files through a shuffle buffer (`start_stream`), each update takes exactly
`train_batch_size_per_learner` timesteps, and `cursor` says where the stream stands, so a
checkpoint can keep it (`algorithms.checkpointing`) and a restored run goes on with exactly the
batches it would have had (`data.stream`).
"""

from __future__ import annotations

import glob
import itertools
import os
import weakref
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from rljax_offline.algorithms.config import AlgorithmConfig, ConfigError
from rljax_offline.algorithms.pipelines import Pipelines
from rljax_offline.connectors import Spaces
from rljax_offline.connectors.rows import episode_rows
from rljax_offline.data import iter_episodes, read_sample_batch_json
from rljax_offline.data.device import DeviceData
from rljax_offline.data.files import resolve_files
from rljax_offline.data.stream import CursorTracker, StreamCursor, stream_batches
from rljax_offline.episode.episode import Episode
from rljax_offline.learning.data_parallel import DataParallel, prefetch_to_device
from rljax_offline.ope.data import split as ope_split
from rljax_offline.runtime import distributed, gc_pause, host_memory


def json_files(input_: Any) -> list[str]:
    """The SampleBatch JSON files named by `input_` (files, folders, globs, or a list)."""
    items = [input_] if isinstance(input_, (str, os.PathLike)) else list(input_)
    files: list[str] = []
    for item in map(os.fspath, items):
        if os.path.isdir(item):
            files += sorted(glob.glob(os.path.join(item, "**", "*.json*"), recursive=True))
        elif any(ch in item for ch in "*?["):
            files += sorted(glob.glob(item, recursive=True))
        else:
            files.append(item)
    if not files:
        raise FileNotFoundError(f"no SampleBatch JSON files in {input_!r}")
    return files


def agreed(connector_state: Any, multi_process: bool) -> Any:
    """In a multi-process run, process 0's connector state (fitted on its share of the
    data) for every process, so the replicated state is one value."""
    if not multi_process or not jax.tree_util.tree_leaves(connector_state):
        return connector_state
    from jax.experimental import multihost_utils  # start-up cost: multi-process runs only

    return multihost_utils.broadcast_one_to_all(jax.device_get(connector_state))


class OfflineData:
    """The offline data of one algorithm (see the module docstring). `device_data`: the
    materialized columns on the devices; `stream`: the streamed batches (with their cursor);
    `resume_cursor`: where a stream restored from a checkpoint (or stopped) goes on from."""

    def __init__(self, config: AlgorithmConfig, spaces: Spaces, gym_spaces: tuple,
                 pipelines: Pipelines, dp: DataParallel, multi_process: bool):
        self.config, self.spaces, self.pipelines, self.dp = config, spaces, pipelines, dp
        self.obs_space, self.act_space = gym_spaces
        self.multi_process = multi_process
        self._learner_apply = jax.jit(pipelines.learner.apply)
        self._prelearner = (config.prelearner_class(config=config, spaces=spaces)
                            if config.prelearner_class is not None else None)
        self.device_data: DeviceData | None = None
        self.stream: CursorTracker | None = None
        self.resume_cursor: StreamCursor | None = None
        self.num_timesteps = self.num_episodes = 0
        # off-policy evaluation's held-out episodes (config.ope_split), read by materialize
        self.ope_episodes: list[Episode] = []

    @property
    def chunk_size(self) -> int:
        """Episodes the streamer turns into columns at a time."""
        return self.config.input_read_batch_size or 16

    @property
    def cursor(self) -> StreamCursor | None:
        """Where streamed data stands for the latest update (None when not streaming or not
        started)."""
        return self.stream.cursor if self.stream is not None else self.resume_cursor

    # ------------------------------------------------------------------ episodes

    def _read_options(self) -> dict:
        c = self.config
        return dict(input_read_episodes=c.input_read_episodes,
                    input_read_schema=c.input_read_schema, input_filesystem=c.input_filesystem,
                    input_filesystem_kwargs=c.input_filesystem_kwargs,
                    on_bad_file=c.on_bad_file, observation_space=self.obs_space,
                    action_space=self.act_space)

    def episodes(self, epoch: int, shuffle: bool = True, start: int = 0) -> Iterator[Episode]:
        """One pass over the data, read as the config says (Parquet episode or tabular rows,
        old SampleBatch JSON lines, or the user's `input_read_method`), shuffled with a new
        seed each epoch where the reader can (the order a pure function of the seed and
        `epoch`), from its `start`-th episode on."""
        c = self.config
        kwargs = dict(c.input_read_method_kwargs or {})
        if callable(c.input_read_method):
            return itertools.islice(iter(c.input_read_method(c.input_, **kwargs)), start, None)
        if c.reads_sample_batches:
            return itertools.islice((ep for path in json_files(c.input_)
                                     for ep in read_sample_batch_json(path, **kwargs)),
                                    start, None)
        kwargs["start"] = start
        if shuffle:
            kwargs.update(shuffle_buffer_size=max(c.shuffle_buffer_size, 1), seed=c.seed + epoch,
                          prefetch=c.prefetch_batches)
        if self.multi_process:  # each process reads every process_count-th file
            distributed.share_of_files(resolve_files(
                c.input_, filesystem=c.input_filesystem,
                filesystem_kwargs=c.input_filesystem_kwargs), f"input_={c.input_!r}")
            kwargs.update(process_index=jax.process_index(), process_count=jax.process_count())
        return iter_episodes(c.input_, **{**self._read_options(), **kwargs})

    def prelearned(self, episodes: list[Episode]) -> list[Episode]:
        """The user's `prelearner_class` hook (RLlib's OfflinePreLearner), if any."""
        if self._prelearner is None:
            return episodes
        out = list(self._prelearner(episodes))
        if not all(isinstance(ep, Episode) for ep in out):
            raise TypeError(f"{type(self._prelearner).__name__} must return Episodes")
        return out

    # ------------------------------------------------------------------ columns

    def columns(self, episodes: list[Episode], connector_state: Any, fit: bool,
                params: Any = None, apply: Any = None, columns: tuple | None = None,
                on_device: bool = False):
        """The learner's columns of `episodes` (padding rows dropped; for a recurrent policy
        the rows are `max_seq_len` sequences, all-padding ones dropped; on the default device
        when `on_device`, else on the host), the connector state (fitted on `episodes` first
        when `fit`), and each episode's row count in row order (None where the pipeline's
        rows are not one block per episode). `params` reach the pieces through the context
        (on-policy pieces such as GAE read the value network); `apply` and `columns` replace
        the learner pipeline and the columns kept (a warm-up pass of another loss)."""
        return episode_rows(apply or self._learner_apply, episodes, connector_state,
                            columns or self.pipelines.columns, fit=fit, params=params,
                            on_device=on_device, what=f"the {self.config.algo_name} learner")

    # ------------------------------------------------------------------ on the devices

    def read_columns(self, connector_state: Any, fit: bool) -> tuple:
        """Reads every episode (the `ope_split` episodes held out first, where off-policy
        estimates are asked for) and returns `(learner columns on the host, connector state,
        each episode's row count or None, the episodes)`, the state fitted on them when
        `fit`; a `ValueError` naming `input_` when there is none."""
        with gc_pause.paused():  # see read_episodes
            episodes = list(self.episodes(0, shuffle=False))
        if self.config.off_policy_estimation_methods:  # held out of training, by episode
            episodes, self.ope_episodes = ope_split(episodes, self.config.ope_split,
                                                    self.config.seed)
        episodes = self.prelearned(episodes)
        if not episodes:
            raise ValueError(f"no episodes found in {self.config.input_!r}")
        return (*self.columns(episodes, connector_state, fit=fit), episodes)

    def materialize(self, connector_state: Any, fit: bool) -> Any:
        """Reads every episode, keeps their learner columns on the devices (`device_data`)
        and returns the connector state, fitted on them when `fit` (a restored state is
        used as saved: fitting it again would count the data twice and break exact
        resume), process 0's in a multi-process run."""
        cols, cstate, lengths, episodes = self.read_columns(connector_state, fit)
        if self.config.sample_unit in ("episodes", "windows") and lengths is None:
            raise ConfigError(f"sample_unit={self.config.sample_unit!r} needs one block of "
                              "rows per episode from the learner pipeline (not a time-dim "
                              "layout)")
        self.device_data = self.dp.put_data(cols, lengths)
        self.num_timesteps = (int(np.sum(cols["seq_lens"])) if "seq_lens" in cols
                              else self.device_data.num_rows)
        self.num_episodes = self.device_data.num_episodes or len(episodes)
        return agreed(cstate, self.multi_process)

    # ------------------------------------------------------------------ streamed

    def start_stream(self, connector_state: Any) -> None:
        """Starts streaming (`stream`) from the restored cursor, or from the beginning with
        `connector_state` as the replay's start."""
        # Large buffers come and go every batch: keep them out of malloc's arenas, where
        # they fragment and the resident set creeps up (see host_memory).
        host_memory.fixed_mmap_threshold()
        start = self.resume_cursor or StreamCursor(
            replay_state=jax.device_get(connector_state))
        # The prefetch thread's generator holds this object weakly: an algorithm that is
        # dropped without stop() is still collected, and its thread then ends.
        batches = OfflineData._global_batches(weakref.proxy(self), start)
        dp = self.dp
        prefetched = prefetch_to_device(batches, lambda item: (dp.put_sharded(item[0]),
                                                                item[1]),
                                        max(self.config.prefetch_batches, 1))
        self.stream = CursorTracker(prefetched, start)
        self.resume_cursor = None

    def streamed_connector_state(self) -> Any:
        """The connector state fitted on the data of the batches consumed so far (the
        producer runs ahead by the prefetch depth: its own state would depend on timing),
        on the host."""
        return jax.device_get(agreed(self.stream.cursor.connector_state, self.multi_process))

    def _global_batches(self, start: StreamCursor) -> Iterator[tuple[dict, StreamCursor]]:
        """This process's share (all of it on one process) of each global batch of exactly
        `train_batch_size_per_learner` timesteps from streamed episodes, epoch after epoch,
        each with its `StreamCursor`, from `start` on; computed on the default device and
        handed on without a trip to the host. The connector state (e.g. a mean-std filter)
        keeps updating as the data streams, as in RLlib. `self` is a weak proxy here."""
        proxy = self

        def read_epoch(epoch: int, position: int) -> Iterator[Episode]:
            return proxy.episodes(epoch, start=position)

        def to_rows(chunk: list[Episode], connector_state: Any):
            cols, connector_state, _ = proxy.columns(
                proxy.prelearned(chunk), connector_state, fit=True, on_device=True)
            return cols, connector_state

        return stream_batches(read_epoch, to_rows, self.dp.local_batch_size,
                              self.chunk_size, start, what=repr(self.config.input_))

    def stop(self) -> None:
        """Ends the prefetch thread of streamed data, keeping its cursor (a later save or
        train goes on from the last batch consumed)."""
        if self.stream is not None:
            self.resume_cursor = self.stream.cursor
            self.stream.close()
            self.stream = None

    def forget_stream(self) -> None:
        """Drops the stream and its cursor (a restore then sets the saved one)."""
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        self.resume_cursor = None
