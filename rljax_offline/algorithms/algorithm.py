"""`Algorithm`: any registered offline algorithm, built from its config.

The algorithm is the same for BC, MARWIL, CQL, IQL and the user's own: its config supplies an
`AlgorithmSpec` (networks and losses, acting, data), the learner core trains it data-parallel,
and this class does what is around it: spaces from the env, connector pipelines, reading the
data, iterations, evaluation in the env, checkpoints.

`train()` runs one iteration (`num_updates_per_iteration` updates, or RLlib's
`dataset_num_iters_per_learner`, in one jitted `lax.scan`
over all selected devices) and returns RLlib-style metrics; `evaluate()` runs the greedy
policy in the env; `save()`/`restore()` checkpoint the whole `TrainState` (every network,
target copies, each optimizer state, RNG, connector state) and `Algorithm.from_checkpoint`
rebuilds any registered algorithm from its folder; resume is exact.

Recurrent policies (`model_config` with `use_lstm` or `use_gru`): the learner pipeline ends
with RLlib's `AddStatesFromEpisodesToBatch` and `AddTimeDimToBatchAndZeroPad` (`state_in` of
each `max_seq_len` sequence, zero padding, `seq_lens`, a `[T]` `loss_mask` per sequence), the
rows kept on the devices (or streamed) are those sequences, and each update samples
`train_batch_size_per_learner / max_seq_len` of them (rounded to a multiple of the device
count), about `train_batch_size_per_learner` timesteps, as RLlib does. Acting carries the
state from step to step (`state_out` recorded per step, the next step's `state_in`).

Data: by default (RLlib's `materialize_data` or `materialize_mapped_data` True) the episodes
are read once, turned into learner columns by the learner connector pipeline (jitted, over
length-bucketed `EpisodeBatch`es) and kept on the devices; network-dependent columns (MARWIL's
value targets) are computed inside each update. With both False the episodes stream from the
files through a shuffle buffer, and each update takes exactly `train_batch_size_per_learner`
timesteps; checkpoints then keep every process's stream cursor (`algorithms.stream`), so a
restored run goes on with exactly the batches it would have had.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np

import rljax_offline.algorithms.registry as registry
from rljax_offline.algorithms.config import AlgorithmConfig, ConfigError
from rljax_offline.connectors import (
    Context,
    Spaces,
    default_env_to_module,
    default_learner,
    default_module_to_env,
    model_connectors,
    pipeline,
)
from rljax_offline.connectors.common import add_states, add_time_dim
from rljax_offline.data.device import DeviceData
from rljax_offline.data.stream import CursorTracker, StreamCursor, stream_batches
from rljax_offline.envs.make import make_env
from rljax_offline.episode.batch import EpisodeBatch
from rljax_offline.episode.episode import Episode
from rljax_offline.learning import checkpoint as ckpt
from rljax_offline.learning.data_parallel import (
    DataParallel,
    prefetch_to_device,
    select_devices,
)
from rljax_offline.learning.init import start_init_state
from rljax_offline.learning.spec import ActingSpec, AlgorithmSpec, TrainState
from rljax_offline.runtime import compilation_cache, distributed, gc_pause, host_memory
from rljax_offline.runtime.background import Background

MODULE_ID = "default_policy"
CHECKPOINT_FORMAT = 2
STREAM_FILE = "stream.msgpack"
_EPISODES_PER_BATCH = 64


def _env_spaces(config: AlgorithmConfig) -> tuple[gym.Space, gym.Space]:
    env = make_env(config.env, config.env_config)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def _json_files(input_: Any) -> list[str]:
    """The SampleBatch JSON files named by `input_` (files, folders, globs, or a list)."""
    import glob
    import os

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


class _PolicyView:
    """An `ActingSpec` in the shape `ActorPolicy` takes (a policy with `apply(params, obs)`,
    `dist`, and for recurrent policies `forward`/`initial_state`): the spec's `act` over all
    its params, or its recurrent `policy` on `params[policy_network]`."""

    def __init__(self, acting: ActingSpec):
        self.apply, self.dist = acting.act, acting.dist
        policy, name = acting.policy, acting.policy_network
        self.is_stateful = acting.is_stateful
        if self.is_stateful:
            self.initial_state = policy.initial_state
            self.forward = lambda params, batch: policy.forward(
                params if name is None else params[name], batch)


class Algorithm:
    """An offline RL algorithm (see the module docstring). Build with `SomeConfig().build()`:
    it returns while the init program compiles on a background thread (`state` waits for it),
    so reading the data overlaps that compile."""

    def __init__(self, config: AlgorithmConfig):
        config.validate()
        self.config = config
        # Before JAX touches a device: join the other processes, open the compile cache.
        self.multi_process = distributed.initialize_from_config(config)
        self.compilation_cache_dir = compilation_cache.enable(config.compilation_cache_dir)
        obs_space, act_space = _env_spaces(config)
        self.spaces = Spaces.of(obs_space, act_space)
        self._obs_space, self._act_space = obs_space, act_space
        config.check_spaces(self.spaces.observation, self.spaces.action)
        custom = config.learner_connector_pieces(self.spaces)
        # lstm_use_prev_action / _reward: stateless pieces after the user's, in both pipelines
        model = model_connectors(config.model_config or {})
        base = default_learner(
            self.spaces, *custom, *model,
            add_default_connectors=config.add_default_connectors_to_learner_pipeline)
        out = base.out_spaces(self.spaces)
        self.spec: AlgorithmSpec = config.make_spec(out.observation, out.action)
        self.is_stateful = self.spec.acting.is_stateful
        sequences, seq_kwargs = (), {}
        if self.is_stateful:
            policy = self.spec.acting.policy
            seq_kwargs = dict(max_seq_len=policy.max_seq_len,
                              initial_state=policy.initial_state())
            sequences = (add_states(**seq_kwargs), add_time_dim(policy.max_seq_len),
                         *self.spec.data.sequence_connector)
            self.spec = self.spec._replace(data=self.spec.data._replace(columns=tuple(
                dict.fromkeys((*self.spec.data.columns, "state_in", "seq_lens", "loss_mask")))))
        self.learner_connector = pipeline(base, *self.spec.data.learner_connector, *sequences)
        e2m_custom = (list(config.env_to_module_connector(self.spaces))
                      if config.env_to_module_connector else custom)
        self._n_shared = len(custom) if config.env_to_module_connector is None else 0
        self.env_to_module_connector = default_env_to_module(
            self.spaces, *e2m_custom, *model,
            add_default_connectors=config.add_default_connectors_to_env_to_module_pipeline,
            **seq_kwargs)
        self.module_to_env_connector = default_module_to_env(
            self.spaces, distribution=self.spec.acting.dist)
        self.devices = select_devices(config.num_devices)
        self.rows_per_update = self._rows_per_update()
        self.dp = DataParallel(self.spec.learning, self.devices, self.rows_per_update,
                               mode=config.update_mode)
        # The init program compiles and runs on a background thread while the caller goes on
        # (reading the data): `self.state` waits for it on first use.
        self._initial_connector_state = self.learner_connector.init(self.spaces)
        self._pending_state: Background | None = start_init_state(
            self.spec.learning, config.seed, connector_state=self._initial_connector_state)
        self._state: TrainState | None = None
        self.iteration = 0
        self.history: list[dict] = []
        self._learner_apply = jax.jit(self.learner_connector.apply)
        self._data: DeviceData | None = None
        self._stream: Any = None
        self._resume_cursor: StreamCursor | None = None
        self._scan = None
        self._restored = False
        self._prelearner = (config.prelearner_class(config=config, spaces=self.spaces)
                            if config.prelearner_class is not None else None)
        self._actor = None
        self._acting_started = False
        self._runner = None
        self.timers: dict[str, float] = {}

    @property
    def state(self) -> TrainState:
        """Every network, optimizer state, RNG and connector state (`TrainState`), replicated
        on the devices. The first use waits for the init program that `build()` left
        compiling in the background, and raises its error if it failed."""
        if self._pending_state is not None:
            state = self._pending_state.result()
            self._state, self._pending_state = self.dp.put_replicated(state), None
        return self._state

    @state.setter
    def state(self, state: TrainState) -> None:
        if self._pending_state is not None:  # replaced unseen: its thread ends, unneeded
            self._pending_state.wait()
            self._pending_state = None
        self._state = state

    @property
    def _connector_state(self) -> Any:
        """The learner connector state, without waiting for a pending init program (its
        state starts from the pipeline's fresh one)."""
        if self._pending_state is not None:
            return self._initial_connector_state
        return self.state.connector_state

    @property
    def algo_name(self) -> str:
        return self.config.algo_name

    def _rows_per_update(self) -> int:
        """Rows of one update: `train_batch_size_per_learner` timesteps (see `_rows_for`)."""
        return self._rows_for(self.config.train_batch_size_per_learner)

    def _rows_for(self, size: int) -> int:
        """Rows holding `size` timesteps: as many, or for a recurrent policy that many
        timesteps in sequences of `max_seq_len` (RLlib's batch of sequences), rounded to a
        multiple of the device count."""
        if not self.is_stateful:
            return size
        n = len(self.devices)
        seqs = size / self.spec.acting.policy.max_seq_len
        return max(n, int(round(seqs / n)) * n)

    @property
    def timesteps_per_update(self) -> int:
        """Timesteps one update trains on (for a recurrent policy: sequences times
        `max_seq_len`, zero padding included)."""
        if self.is_stateful:
            return self.rows_per_update * self.spec.acting.policy.max_seq_len
        return self.rows_per_update

    # ------------------------------------------------------------------ data

    def _read_options(self) -> dict:
        c = self.config
        return dict(input_read_episodes=c.input_read_episodes,
                    input_read_schema=c.input_read_schema, input_filesystem=c.input_filesystem,
                    input_filesystem_kwargs=c.input_filesystem_kwargs,
                    on_bad_file=c.on_bad_file, observation_space=self._obs_space,
                    action_space=self._act_space)

    def _columns(self, episodes: list[Episode], connector_state: Any, fit: bool,
                 params: Any = None, apply: Any = None, columns: tuple | None = None,
                 on_device: bool = False):
        """The learner's columns of `episodes` (padding rows dropped; for a recurrent policy
        the rows are `max_seq_len` sequences, all-padding ones dropped; on the default device
        when `on_device`, else on the host), the connector state (fitted on `episodes` first
        when `fit`), and each episode's row count in row order (None where the pipeline's
        rows are not one block per episode). `params` reach the pieces through the context
        (on-policy pieces such as GAE read the value network); `apply` and `columns` replace
        the learner pipeline and the columns kept (a warm-up pass of another loss)."""
        apply = apply or self._learner_apply
        episodes = sorted(episodes, key=len)
        groups = [episodes[i:i + _EPISODES_PER_BATCH]
                  for i in range(0, len(episodes), _EPISODES_PER_BATCH)]
        # Padded to a power of two of episodes (few shapes to compile), no further: a
        # streamed chunk of 4 Atari episodes must not become 64 episodes of padding.
        pads = [min(_EPISODES_PER_BATCH, 1 << (len(g) - 1).bit_length()) for g in groups]
        batches = [EpisodeBatch.from_episodes(g, pad_batch_to=pad)
                   for g, pad in zip(groups, pads)]
        if fit and jax.tree_util.tree_leaves(connector_state):
            for eb in batches:
                _, _, connector_state = apply(connector_state, eb, {}, Context(params=params))
        wanted = columns or self.spec.data.columns
        cols: dict[str, list] = {k: [] for k in wanted}
        lengths: list | None = []
        xp = jnp if on_device else np
        for eb, group, pad in zip(batches, groups, pads):
            _, batch, _ = apply(connector_state, eb, {}, Context(frozen=True, params=params))
            missing = [k for k in wanted if k not in batch]
            if missing:
                raise KeyError(f"the {self.algo_name} learner reads columns {missing} that the "
                               f"learner pipeline does not make; it makes {sorted(batch)}")
            # rows: the valid timesteps, or for a recurrent policy the sequences with steps
            keep = np.asarray(batch["seq_lens"] > 0 if "seq_lens" in batch
                              else batch["loss_mask"])
            rows = np.flatnonzero(keep)
            if lengths is not None and keep.size % pad == 0:
                per_episode = keep.reshape(pad, -1).sum(axis=1)[:len(group)]
                lengths.extend(int(c) for c in per_episode if c)
            else:
                lengths = None
            for k in wanted:
                cols[k].append(jax.tree_util.tree_map(
                    lambda x, rows=rows: xp.take(xp.asarray(x), rows, axis=0), batch[k]))
        out = {k: jax.tree_util.tree_map(lambda *xs: xp.concatenate(xs), *v)
               for k, v in cols.items()}
        return out, connector_state, lengths

    def _episode_stream(self, epoch: int, shuffle: bool = True, start: int = 0
                        ) -> Iterator[Episode]:
        """One pass over the data, read as the config says (Parquet episode or tabular rows,
        old SampleBatch JSON lines, or the user's `input_read_method`), shuffled with a new
        seed each epoch where the reader can (the order a pure function of the seed and
        `epoch`), from its `start`-th episode on."""
        import itertools

        from rljax_offline.data import iter_episodes

        c = self.config
        kwargs = dict(c.input_read_method_kwargs or {})
        if callable(c.input_read_method):
            return itertools.islice(iter(c.input_read_method(c.input_, **kwargs)), start, None)
        if c.reads_sample_batches:
            from rljax_offline.data import read_sample_batch_json

            return itertools.islice((ep for path in _json_files(c.input_)
                                     for ep in read_sample_batch_json(path, **kwargs)),
                                    start, None)
        kwargs["start"] = start
        if shuffle:
            kwargs.update(shuffle_buffer_size=max(c.shuffle_buffer_size, 1), seed=c.seed + epoch,
                          prefetch=c.prefetch_batches)
        if self.multi_process:  # each process reads every process_count-th file
            from rljax_offline.data.files import resolve_files

            distributed.share_of_files(resolve_files(
                c.input_, filesystem=c.input_filesystem,
                filesystem_kwargs=c.input_filesystem_kwargs), f"input_={c.input_!r}")
            kwargs.update(process_index=jax.process_index(), process_count=jax.process_count())
        return iter_episodes(c.input_, **{**self._read_options(), **kwargs})

    def _prelearned(self, episodes: list[Episode]) -> list[Episode]:
        """The user's `prelearner_class` hook (RLlib's OfflinePreLearner), if any."""
        if self._prelearner is None:
            return episodes
        out = list(self._prelearner(episodes))
        if not all(isinstance(ep, Episode) for ep in out):
            raise TypeError(f"{type(self._prelearner).__name__} must return Episodes")
        return out

    def load_data(self) -> None:
        """Reads the data (RLlib does this in the first iteration); called by `train()`."""
        if self.config.input_ is None:
            raise ConfigError("no offline data: set config.offline_data(input_=...)")
        t0 = time.perf_counter()
        if not self.config.streams_data:
            with gc_pause.paused():  # see read_episodes
                episodes = self._prelearned(list(self._episode_stream(0, shuffle=False)))
            if not episodes:
                raise ValueError(f"no episodes found in {self.config.input_!r}")
            # A restored connector state (a fitted mean-std filter) is used as saved: fitting it
            # again would count the data twice and break exact resume.
            cols, cstate, lengths = self._columns(episodes, self._connector_state,
                                                  fit=not self._restored)
            self.state = self.dp.put_replicated(self.state._replace(
                connector_state=self._agreed(cstate)))
            if self.config.sample_unit == "episodes" and lengths is None:
                raise ConfigError("sample_unit='episodes' needs one block of rows per episode "
                                  "from the learner pipeline (not a time-dim layout)")
            self._data = self.dp.put_data(cols, lengths)
            self.num_timesteps = (int(np.sum(cols["seq_lens"])) if self.is_stateful
                                  else self._data.num_rows)
            self.num_episodes = self._data.num_episodes or len(episodes)
        else:
            # Large buffers come and go every batch: keep them out of malloc's arenas, where
            # they fragment and the resident set creeps up (see host_memory).
            host_memory.fixed_mmap_threshold()
            start = self._resume_cursor or StreamCursor(
                replay_state=jax.device_get(self._connector_state))
            # The prefetch thread's generator holds the algorithm weakly: an algorithm that
            # is dropped without stop() is still collected, and its thread then ends.
            batches = Algorithm._global_batches(weakref.proxy(self), start)
            dp = self.dp
            prefetched = prefetch_to_device(batches, lambda item: (dp.put_sharded(item[0]),
                                                                    item[1]),
                                            max(self.config.prefetch_batches, 1))
            self._stream = CursorTracker(prefetched, start)
            self._resume_cursor = None
        self.timers["data_load_s"] = time.perf_counter() - t0

    def _agreed(self, connector_state: Any) -> Any:
        """In a multi-process run, process 0's connector state (fitted on its share of the
        data) for every process, so the replicated state is one value."""
        if not self.multi_process or not jax.tree_util.tree_leaves(connector_state):
            return connector_state
        from jax.experimental import multihost_utils

        return multihost_utils.broadcast_one_to_all(jax.device_get(connector_state))

    def _global_batches(self, start: StreamCursor) -> Iterator[tuple[dict, StreamCursor]]:
        """This process's share (all of it on one process) of each global batch of exactly
        `train_batch_size_per_learner` timesteps from streamed episodes, epoch after epoch,
        each with its `StreamCursor`, from `start` on; computed on the default device and
        handed on without a trip to the host. The connector state (e.g. a mean-std filter)
        keeps updating as the data streams, as in RLlib. `self` is a weak proxy here."""
        proxy = self

        def read_epoch(epoch: int, position: int) -> Iterator[Episode]:
            return proxy._episode_stream(epoch, start=position)

        def to_rows(chunk: list[Episode], connector_state: Any):
            cols, connector_state, _ = proxy._columns(
                proxy._prelearned(chunk), connector_state, fit=True, on_device=True)
            return cols, connector_state

        return stream_batches(read_epoch, to_rows, self.dp.local_batch_size,
                              self._stream_chunk_size, start, what=repr(self.config.input_))

    @property
    def _stream_chunk_size(self) -> int:
        return self.config.input_read_batch_size or 16

    # ------------------------------------------------------------------ training

    def train(self) -> dict:
        """One training iteration; returns RLlib-style metrics."""
        t0 = time.perf_counter()
        if self._data is None and self._stream is None:
            self.load_data()
        n = self.config.updates_per_iteration
        t_upd = time.perf_counter()
        # What acting needs of the state is taken before the updates donate its buffers;
        # the acting step then compiles in the background while the updates run.
        acting, preparing = self._acting_inputs(), None
        try:
            metrics = self._update(n)
            if acting is not None:
                preparing = Background(self._compiled_actor, *acting)
            metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
        finally:
            if preparing is not None:
                self._keep_compiled_actor(preparing)
        extra = {k: float(v) for k, v in jax.device_get(self.state.extra).items()
                 if np.ndim(v) == 0}
        update_s = time.perf_counter() - t_upd
        self.iteration += 1
        steps = n * self.timesteps_per_update
        learner = {**metrics, **extra, "num_module_steps_trained": steps,
                   "num_module_steps_trained_lifetime": steps * self.iteration}
        result = {
            "training_iteration": self.iteration,
            "algorithm": self.algo_name,
            "learners": {MODULE_ID: learner, "__all_modules__": {
                "num_env_steps_trained": steps,
                "num_env_steps_trained_lifetime": steps * self.iteration,
                "learner_update_timer": update_s / n}},
            "num_devices": len(self.devices),
        }
        interval = self.config.evaluation_interval
        if interval and self.iteration % interval == 0:
            result["evaluation"] = {"env_runners": self.evaluate()}
        result["time_this_iter_s"] = time.perf_counter() - t0
        self.history.append(result)
        return result

    def _update(self, n: int) -> dict:
        """`n` updates on the materialized or streamed data, dispatched; their metrics (device
        arrays, ready when the updates are done)."""
        if self._data is not None:
            if self._scan is None:
                self._scan = self.dp.scan_on_device(n, self.config.sample_unit)
            self.state, metrics = self._scan(self.state, self._data)
        else:
            self.state, metrics = self.dp.stream_updates(self.state, self._stream, n)
            # The connector state fitted on the data of the batches consumed so far (the
            # producer runs ahead by the prefetch depth: its own state would depend on
            # timing). Put from a host copy: a device_put can alias the prefetch thread's
            # buffers, which the next update donates.
            self.state = self.state._replace(connector_state=self.dp.put_replicated(
                jax.device_get(self._agreed(self._stream.cursor.connector_state))))
        return metrics

    # ------------------------------------------------------------------ acting

    def _acting_inputs(self) -> tuple | None:
        """On the first iteration of a process, what compiling the evaluation actor's step
        needs (`_compiled_actor`'s arguments): zero params of the right shapes, the fitted
        env-to-module state and observations shaped like `evaluate()`'s envs'. None when an
        actor exists already."""
        if self._actor is not None or self._acting_started:
            return None
        self._acting_started = True
        try:
            params = jax.tree_util.tree_map(lambda x: np.zeros(x.shape, x.dtype),
                                            self.state.params)
            num_envs = min(self.config.evaluation_num_envs, self.config.evaluation_duration)
            obs = gym.vector.utils.create_empty_array(self._obs_space, num_envs)
            return self.config.evaluation_explore, params, self._e2m_state(), obs
        except Exception:  # noqa: BLE001 - as in _keep_compiled_actor: acting raises its own
            return None

    def _compiled_actor(self, explore: bool, params: Any, e2m_state: Any, obs: Any):
        """A new actor whose step is compiled for envs observing a batch like `obs` (run on a
        background thread while the first updates run, so the first evaluation acts at
        once)."""
        actor = self._new_actor(explore)
        actor.params, actor.e2m_state = params, e2m_state
        actor.compile(obs)
        return actor

    def _keep_compiled_actor(self, acting: Background) -> None:
        """Keeps the actor compiled in the background. If preparing it failed, acting was
        going to fail too: `evaluate()` then builds its actor again and raises that error
        where it belongs, not in `train()`."""
        try:
            actor = acting.result()
        except Exception:  # noqa: BLE001 - acting's own errors are raised by acting
            return
        if self._actor is None:
            self._actor = actor

    def _e2m_state(self):
        """The env-to-module state: the learner's fitted state for the shared custom pieces
        (the learner pipeline's state is (defaults-with-custom, *algorithm pieces))."""
        fresh = self.env_to_module_connector.init(self.spaces)
        learned = jax.device_get(self.state.connector_state)[0]
        return tuple(learned[:self._n_shared]) + tuple(fresh[self._n_shared:])

    def actor(self, explore: bool | None = None):
        """An `ActorPolicy` with the current params and env-to-module state (for
        `EnvRunner`; compiled once per explore flag and kept)."""
        explore = self.config.evaluation_explore if explore is None else explore
        if self._actor is None or self._actor.explore != explore:
            self._actor = self._new_actor(explore)
        return self._synced(self._actor)

    def _new_actor(self, explore: bool):
        """A new `ActorPolicy` of this algorithm's policy between its pipelines (each runner
        needs its own: an actor holds its envs' windows)."""
        from rljax_offline.acting.actor import ActorPolicy

        return ActorPolicy(_PolicyView(self.spec.acting), None, self.spaces,
                           self.env_to_module_connector, None, self.module_to_env_connector,
                           lookback=self.config.episode_lookback_horizon, explore=explore)

    def _synced(self, actor):
        """`actor` with the current params and fitted env-to-module state."""
        actor.params = jax.device_get(self.state.params)
        actor.e2m_state = self._e2m_state()
        return actor

    def compute_actions(self, obs: Any, explore: bool = False) -> np.ndarray:
        """Actions for a batch of raw env observations (`[N, ...]`, or a dict of them for Dict
        spaces), each taken as the first of its episode; to act over whole episodes (lookback
        pipelines, recurrent policies) use `EnvRunner(env, algo.actor())`."""
        actor = self.actor(explore)
        actor.reset(obs, self.config.seed)
        return actor.select()[0]

    def evaluate(self, num_episodes: int | None = None) -> dict:
        """Runs the policy in the env; RLlib's `env_runners` metrics."""
        from rljax_offline.acting.env_runner import EnvRunner, episode_stats

        n = num_episodes or self.config.evaluation_duration
        actor = self.actor()
        if self._runner is None:
            self._runner = EnvRunner(self.config.env, actor,
                                     num_envs=min(self.config.evaluation_num_envs, n),
                                     seed=self.config.seed + 10_000,
                                     env_config=self.config.env_config)
        self._runner.policy = actor
        self._runner.seed = self.config.seed + 10_000 + 1_000 * self.iteration
        t0 = time.perf_counter()
        stats = episode_stats(self._runner.sample(num_episodes=n))
        stats["evaluation_time_s"] = time.perf_counter() - t0
        return stats

    def export_policy(self, path: str, format: str = "stablehlo") -> str:
        """Writes one greedy acting step, pipelines inlined, as one graph, and its signature
        as `<path>.json` (`rljax_offline.export`): `act(obs)`, or for recurrent policies and
        pipelines that read past steps `step(inputs)` with the state and `t`."""
        from rljax_offline.export import PolicyParts, export_policy

        return export_policy(PolicyParts(
            _PolicyView(self.spec.acting), jax.device_get(self.state.params),
            self.env_to_module_connector, self._e2m_state(), self.module_to_env_connector,
            self.spaces, self.config.episode_lookback_horizon), path, format)

    # ------------------------------------------------------------------ checkpoints

    def save(self, path: str) -> str:
        """An atomic checkpoint of everything needed to resume exactly, the stream cursor
        of streamed data included. In a multi-process run every process calls it (each
        hands over its own cursor) and process 0 alone writes."""
        stream, files = self._stream_checkpoint()  # a collective: before the writer check
        if not distributed.is_writer():
            return path
        meta = {"format": CHECKPOINT_FORMAT, "algorithm": self.algo_name,
                "config": self.config.to_dict(), "iteration": self.iteration,
                "history": self.history}
        if stream is not None:
            meta["stream"] = stream
        return ckpt.save_checkpoint(path, self.state, meta, files)

    def _stream_cursor(self) -> StreamCursor | None:
        """Where streamed data stands for the state in `self.state` (None when not streaming
        or not started)."""
        return self._stream.cursor if self._stream is not None else self._resume_cursor

    def _stream_checkpoint(self) -> tuple[dict | None, dict]:
        """The stream cursors of every process: readable numbers for meta.json and their
        replay connector states as `stream.msgpack` (one entry a process, in process
        order: each process streams its own share of the files)."""
        from flax import serialization

        cursor = self._stream_cursor()
        if cursor is None:
            return None, {}
        mine = serialization.msgpack_serialize({"summary": cursor.summary(),
                                                "replay": cursor.replay_bytes()})
        everyone = [serialization.msgpack_restore(b)
                    for b in distributed.allgather_bytes(mine)]
        meta = {"batch_size": self.dp.local_batch_size, "chunk_size": self._stream_chunk_size,
                "shuffle_buffer_size": self.config.shuffle_buffer_size,
                "processes": [e["summary"] for e in everyone]}
        replay = serialization.msgpack_serialize([e["replay"] for e in everyone])
        return meta, {STREAM_FILE: replay}

    def _restore_stream(self, path: str, meta: dict) -> None:
        """The stream cursor of this process from a checkpoint (see `_stream_checkpoint`)."""
        from flax import serialization

        saved = meta.get("stream")
        if saved is None or not self.config.streams_data:
            return
        processes = saved["processes"]
        if len(processes) != jax.process_count():
            raise ckpt.CheckpointError(
                f"checkpoint {path!r} streamed its data on {len(processes)} process(es); "
                f"resume it on as many (each streams its own share of the files), not "
                f"{jax.process_count()}")
        now = {"batch_size": self.dp.local_batch_size, "chunk_size": self._stream_chunk_size,
               "shuffle_buffer_size": self.config.shuffle_buffer_size}
        changed = {k: (saved.get(k), v) for k, v in now.items() if saved.get(k) != v}
        if changed:
            raise ckpt.CheckpointError(
                f"checkpoint {path!r} streamed its data with other settings (saved, now): "
                f"{changed}; the resumed stream would not be the one that was saved")
        raw = ckpt.load_file(path, STREAM_FILE)
        if raw is None:
            raise ckpt.CheckpointError(f"checkpoint {path!r} is incomplete: its meta names a "
                                       f"stream cursor but {STREAM_FILE} is missing")
        try:
            replay = serialization.msgpack_restore(raw)[jax.process_index()]
            self._resume_cursor = StreamCursor.restored(
                processes[jax.process_index()], replay, self.state.connector_state)
        except Exception as e:  # noqa: BLE001 - flax/msgpack raise many types for a mismatch
            raise ckpt.CheckpointError(f"checkpoint {path!r}: {STREAM_FILE} does not match "
                                       f"this config: {type(e).__name__}: {e}") from None

    def restore(self, path: str) -> None:
        """Loads a checkpoint of this algorithm; training continues exactly where it was."""
        meta = ckpt.load_meta(path)
        saved = meta.get("algorithm", "bc")
        if saved != self.algo_name:
            raise ValueError(f"checkpoint {path!r} holds a {saved!r} algorithm, not "
                             f"{self.algo_name!r}; use Algorithm.from_checkpoint(path)")
        if self._stream is not None:  # a stream from before: resume from the saved cursor
            self._stream.close()
            self._stream = None
        self._resume_cursor = None
        self._restore_stream(path, meta)
        self.state = self.dp.put_replicated(ckpt.load_state(path, self.state))
        self._restored = True
        self.iteration = int(meta["iteration"])
        self.history = list(meta.get("history", []))

    @classmethod
    def from_checkpoint(cls, path: str, config: AlgorithmConfig | None = None) -> Algorithm:
        """Rebuilds any registered algorithm from a checkpoint (its saved config unless one
        is given: needed when the run used custom connector pieces, which are code)."""
        meta = ckpt.load_meta(path)
        if config is None:
            saved = meta["config"]
            code = AlgorithmConfig.code_options(saved)
            if any(k != "input_filesystem" for k in code):
                raise ValueError(f"this checkpoint was trained with code in its config {code} "
                                 "(custom connector pieces, readers or hooks): pass the same "
                                 "config to from_checkpoint(path, config)")
            config = registry.config_class(meta.get("algorithm", "bc")).from_dict(saved)
        algo = config.build()
        algo.restore(path)
        return algo

    def stop(self) -> None:
        """Ends the prefetch thread of streamed data (keeping its cursor: a later `save()`
        or `train()` goes on from the last batch consumed) and closes the evaluation envs."""
        if self._stream is not None:
            self._resume_cursor = self._stream.cursor
            self._stream.close()
            self._stream = None
        if self._runner is not None:
            self._runner.close()
            self._runner = None
