"""`DataParallel`: runs a `LearningSpec`'s per-device update over devices (one process's, or,
under `jax.distributed`, every process's), in one of three modes that agree: `jax.shard_map`
with `check_vma` over a `("data",)` mesh (default), `jax.pmap`, or plain `jit` on one device.

Three ways to feed it: one placed batch per `step`; `scan_on_device`, a `lax.scan` of updates
each sampling its minibatch on the device from an on-device dataset (`data.device`); and
`epochs_on_device`, PPO's epochs of minibatches over one rollout; `scan_on_buffer`, updates on
minibatches sampled from a replay buffer (SAC). `stream_updates` steps
through batches a prefetch thread places (`prefetch_to_device`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from rljax_offline.data.device import (
    DeviceData,
    DeviceDataset,
    check_episodes,
    device_slice,
    make_device_dataset,
)
from rljax_offline.learning.spec import LearningSpec, TrainState
from rljax_offline.learning.update import AXIS, make_update
from rljax_offline.runtime.prefetch import Prefetcher

MODES = ("shard_map", "pmap", "jit")


def select_devices(num_devices: int | str = "all") -> list:
    """The devices the learner runs on: this process's first `num_devices` local ones, or,
    in a multi-process run (`jax.distributed`), every device of every process.

    Args:
      num_devices: "all" or how many local devices to use.
    """
    if jax.process_count() > 1:
        local = len(jax.local_devices())
        if num_devices not in ("all", local):
            raise ValueError(f"num_devices={num_devices!r}: a multi-process run uses all "
                             f"{local} local devices of every process ('all')")
        return sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    devices = jax.local_devices()
    if num_devices == "all":
        return devices
    if not isinstance(num_devices, int) or not 0 < num_devices <= len(devices):
        raise ValueError(f"num_devices={num_devices!r}: {len(devices)} local devices exist")
    return devices[:num_devices]


# ---------------------------------------------------------------------- multi-process placement


def _put(tree, sharding, multi_process: bool):
    """`tree` onto `sharding`; in a multi-process run each process passes its own rows (for a
    replicated sharding: the same whole values) and gets a global array."""
    if not multi_process:
        return jax.device_put(tree, sharding)

    def one(x):
        if isinstance(x, jax.Array) and x.sharding == sharding:
            return x
        if not isinstance(x, jax.Array) or sharding.spec == P():
            return jax.make_array_from_process_local_data(sharding, np.asarray(x))
        # Rows already on a device (a streamed batch): device to device, no trip to the host.
        # This process's rows are its block of the global rows (its devices are contiguous
        # in the mesh, see select_devices).
        local = x.shape[0]
        global_shape = (local * jax.process_count(), *x.shape[1:])
        offset = jax.process_index() * local
        pieces = [jax.device_put(x[rows.start - offset:rows.stop - offset], device)
                  for device, (rows, *_) in
                  sharding.addressable_devices_indices_map(global_shape).items()]
        return jax.make_array_from_single_device_arrays(global_shape, sharding, pieces)

    return jax.tree_util.tree_map(one, tree)


def _allgather_ints(values: np.ndarray) -> list[np.ndarray]:
    """Every process's 1-D int vector (lengths may differ), in process order."""
    from jax.experimental import multihost_utils  # optional: only multi-process runs need it

    values = np.asarray(values, np.int64)
    sizes = multihost_utils.process_allgather(np.asarray([values.size], np.int64))
    width = max(int(sizes.max()), 1)
    padded = np.zeros(width, np.int64)
    padded[:values.size] = values
    gathered = multihost_utils.process_allgather(padded)
    return [gathered[p, :int(sizes[p, 0])] for p in range(len(sizes))]


class DataParallel:
    """Runs a spec's per-device update over devices (one process's, or, under
    `jax.distributed`, every process's: see `select_devices`).

    Args:
      learning: the algorithm's `LearningSpec`.
      devices: the devices (one is fine).
      global_batch_size: rows of one update over all devices; must divide evenly.
      mode: "shard_map" (default: `jax.shard_map` with `check_vma=True` over a `("data",)`
        mesh), "pmap" (`jax.pmap`), or "jit" (plain jit, one device, no axis).
    """

    def __init__(self, learning: LearningSpec, devices: list, global_batch_size: int,
                 mode: str = "shard_map"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        n = len(devices)
        if mode == "jit" and n != 1:
            raise ValueError(f"mode='jit' runs on one device, got {n}")
        if global_batch_size % n:
            raise ValueError(f"train_batch_size_per_learner={global_batch_size} does not "
                             f"divide over {n} devices; use a multiple of {n}")
        self.learning, self.devices, self.mode = learning, devices, mode
        self.process_count = len({d.process_index for d in devices})
        self.multi_process = self.process_count > 1
        if self.multi_process and mode == "pmap":
            raise ValueError("update_mode='pmap' runs on one process; use 'shard_map'")
        self.local_devices = [d for d in devices if d.process_index == jax.process_index()]
        self.batch_size = global_batch_size
        self.local_batch_size = global_batch_size // self.process_count
        self.mesh = Mesh(np.asarray(devices), (AXIS,))
        self.replicated = NamedSharding(self.mesh, P())
        self.sharded = NamedSharding(self.mesh, P(AXIS))
        self.axis_name = None if mode == "jit" else AXIS
        self._update = make_update(learning, axis_name=self.axis_name,
                                   grads_summed=mode == "shard_map")

    # -------------------------------------------------------------- placement

    def put_replicated(self, tree):
        """The same values on every device (every process passes the whole tree)."""
        return _put(tree, self.replicated, self.multi_process)

    def put_sharded(self, tree):
        """One global batch, sharded on rows; each process passes its own
        `local_batch_size` rows (all of them in a single-process run)."""
        return _put(tree, self.sharded, self.multi_process)

    def dataset(self, sample_unit: str = "timesteps", window: int | None = None
                ) -> DeviceDataset:
        """The on-device dataset (`data.device`) on these devices: its `put` places rows
        sharded here, its `sample` draws this update's global minibatches (of `window`-step
        windows for the "windows" unit)."""
        return make_device_dataset(
            batch_size=self.batch_size, num_local_devices=len(self.local_devices),
            put_sharded=self.put_sharded, put_replicated=self.put_replicated,
            axis_name=self.axis_name, sample_unit=sample_unit,
            allgather=_allgather_ints if self.multi_process else None, window=window)

    def put_data(self, columns: dict, episode_lengths=None) -> DeviceData:
        """Materialized learner columns onto the devices, once, sharded along rows
        (`DeviceDataset.put`: each process passes its own rows and, for episode sampling,
        the lengths of its episodes in row order; the padding is never sampled)."""
        return self.dataset().put(columns, episode_lengths)

    def check_batch(self, batch: dict) -> None:
        """A clear error when a host batch is not one (process-local share of a) global
        batch."""
        n = len(jax.tree_util.tree_leaves(batch)[0])
        if n != self.local_batch_size:
            share = (f" ({self.local_batch_size} rows from each of {self.process_count} "
                     "processes)" if self.multi_process else "")
            raise ValueError(f"a batch has {n} rows; each update takes exactly "
                             f"train_batch_size_per_learner={self.batch_size} rows{share}")

    # -------------------------------------------------------------- per-device programs

    def my_rows(self, idx: jax.Array) -> jax.Array:
        """This device's slice of a global index vector (all of it with no axis)."""
        return device_slice(idx, self.axis_name)

    def _step_with_keys(self, state: TrainState, batch: dict):
        """One update whose per-example keys come from the global batch's key vector, so
        every sharding gives each example the same key."""
        _, key = jax.random.split(state.rng)
        keys = self.my_rows(jax.random.split(key, self.batch_size))
        return self._update(state, batch, keys)

    def _sample_steps(self, num_updates: int, dataset: DeviceDataset, block_counts: tuple,
                      block_rows: int):
        def per_device(state, columns, starts, lengths):
            data = DeviceData(columns, starts, lengths, block_counts, block_rows)

            def body(state, _):
                rng, key = jax.random.split(state.rng)
                batch = dataset.sample(key, data)
                return self._step_with_keys(state._replace(rng=rng), batch)

            state, metrics = lax.scan(body, state, None, length=num_updates)
            return state, last_and_mean(metrics)

        return per_device

    def _epoch_steps(self, num_epochs: int, cyclic_minibatches: int | None = None):
        B = self.batch_size

        def per_device(state, data):
            n = jax.tree_util.tree_leaves(data)[0].shape[0]
            if cyclic_minibatches is None and n < B:
                raise ValueError(f"{n} rows cannot fill one minibatch of {B}")
            num_minibatches = cyclic_minibatches or n // B

            def epoch(state, _):
                rng, key = jax.random.split(state.rng)
                if cyclic_minibatches is None:
                    order = jax.random.permutation(key, n)[:num_minibatches * B]
                else:
                    order = _cyclic_valid_order(key, data["loss_mask"], num_minibatches * B)

                def minibatch(state, idx):
                    batch = jax.tree_util.tree_map(
                        lambda x: jnp.take(x, self.my_rows(idx), axis=0), data)
                    return self._step_with_keys(state, batch)

                return lax.scan(minibatch, state._replace(rng=rng),
                                order.reshape(num_minibatches, B))

            state, metrics = lax.scan(epoch, state, None, length=num_epochs)
            metrics = jax.tree_util.tree_map(lambda x: x.reshape(-1, *x.shape[2:]), metrics)
            return state, last_and_mean(metrics)

        return per_device

    def compile_per_device(self, per_device, arg_specs: tuple):
        """`per_device(state, *args)` for this mode: replicated state in and out, each arg
        sharded on rows (`P(AXIS)`) or replicated (`P()`)."""
        if self.mode == "jit":
            return jax.jit(per_device, donate_argnums=0)
        if self.mode == "shard_map":
            f = jax.shard_map(per_device, mesh=self.mesh, in_specs=(P(), *arg_specs),
                              out_specs=(P(), P()), check_vma=True)
            return jax.jit(f, donate_argnums=0)
        n = len(self.devices)
        # pmap needs one argument mapped over the devices: where every arg is replicated
        # (PPO's epochs over one replicated rollout), the devices' indices are that argument.
        axes = [0 if s == P(AXIS) else None for s in arg_specs]
        by_index = 0 not in axes
        pm = jax.pmap((lambda state, _, *args: per_device(state, *args)) if by_index
                      else per_device, axis_name=AXIS, devices=self.devices,
                      in_axes=(None, *([0] if by_index else []), *axes), out_axes=None)
        indices = (np.arange(n),) if by_index else ()

        def run(state, *args):
            args = [jax.tree_util.tree_map(
                lambda x: x.reshape(n, x.shape[0] // n, *x.shape[1:]), a) if s == P(AXIS)
                else a for a, s in zip(args, arg_specs)]
            return pm(state, *indices, *args)

        return run

    @functools.cached_property
    def step(self):
        """`(state, global_batch) -> (state, metrics)`: one update, the batch sharded."""
        return self.compile_per_device(self._step_with_keys, (P(AXIS),))

    def scan_on_device(self, num_updates: int, sample_unit: str = "timesteps",
                       window: int | None = None):
        """`(state, data) -> (state, metrics)`: `num_updates` updates in one `lax.scan`, each
        on a global minibatch sampled on the device (`DeviceDataset.sample`) from `data`, a
        `DeviceData` from `put_data` (a dict of equal-length host arrays is put there
        first). Every device draws the same indices and gathers its slice of the batch from
        the row-sharded data, so any device or process count gives the one-device result.
        Metrics: the last update's, plus `*_mean` over all. `window`: steps of a window, for
        the "windows" unit (`data.device.sample_windows`)."""
        dataset = self.dataset(sample_unit, window)
        compiled: dict = {}

        def run(state, data):
            if not isinstance(data, DeviceData):
                data = dataset.put(jax.device_get(data))
            check_episodes(sample_unit, data)
            meta = (data.block_counts, data.block_rows)
            if meta not in compiled:
                compiled[meta] = self.compile_per_device(
                    self._sample_steps(num_updates, dataset, *meta), (P(AXIS), P(), P()))
            return compiled[meta](state, data.columns, data.episode_starts,
                                  data.episode_lengths)

        return run

    def scan_on_buffer(self, num_updates: int, sample):
        """`(state, buffer) -> (state, metrics)`: `num_updates` updates in one `lax.scan`,
        each on a global minibatch `sample(buffer, key)` draws from `buffer` (a replay
        buffer's state, replicated on every device: `data.replay`). Every device draws the
        same global batch and trains on its slice of it, so any device count gives the
        one-device result. Metrics as `scan_on_device`."""
        if num_updates < 1:
            raise ValueError(f"num_updates must be >= 1, got {num_updates}")

        def per_device(state, buffer):
            def body(state, _):
                rng, key = jax.random.split(state.rng)
                batch = jax.tree_util.tree_map(self.my_rows, sample(buffer, key))
                return self._step_with_keys(state._replace(rng=rng), batch)

            state, metrics = lax.scan(body, state, None, length=num_updates)
            return state, last_and_mean(metrics)

        return self.compile_per_device(per_device, (P(),))

    def epochs_on_device(self, num_epochs: int, num_minibatches: int | None = None):
        """`(state, data) -> (state, metrics)`: on-policy epochs (PPO) in one program: each
        epoch a fresh permutation of `data`'s rows (replicated on every device) cut into
        `len(data) // batch_size` global minibatches, one update each (rows past the last
        full minibatch sit that epoch out). Metrics as `scan_on_device`.

        With `num_minibatches` (sequence rows padded to a fixed count, so one program serves
        rollouts of any shape): each epoch runs exactly that many minibatches over a fresh
        permutation of the rows with a valid step (`loss_mask` anywhere True), cycling
        through them when they are fewer (RLlib's `MiniBatchCyclicIterator`); all-padding
        rows are never drawn. A row's place in the permutation depends on its index and the
        key only, not on how many padding rows follow."""
        if num_epochs < 1:
            raise ValueError(f"num_epochs must be >= 1, got {num_epochs}")
        if num_minibatches is not None and num_minibatches < 1:
            raise ValueError(f"num_minibatches must be >= 1, got {num_minibatches}")
        return self.compile_per_device(self._epoch_steps(num_epochs, num_minibatches), (P(),))

    def stream_updates(self, state: TrainState, batches: Iterator[dict], num_updates: int):
        """`num_updates` updates on global batches from `batches` (placed with
        `prefetch_to_device(..., self.put_sharded)`, or host batches, placed here)."""
        if num_updates < 1:
            raise ValueError(f"num_updates must be >= 1, got {num_updates}")
        history = []
        for _ in range(num_updates):
            batch = next(batches)
            if not isinstance(jax.tree_util.tree_leaves(batch)[0], jax.Array):
                self.check_batch(batch)
                batch = self.put_sharded(batch)
            state, metrics = self.step(state, batch)
            history.append(metrics)
        stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *history)
        return state, last_and_mean(stacked)


def _cyclic_valid_order(key: jax.Array, loss_mask: jax.Array, size: int) -> jax.Array:
    """`size` row indices: the rows with a valid step in a random order (one uniform draw
    per row index, so padding rows appended change nothing), repeated cyclically."""
    valid = loss_mask.reshape(loss_mask.shape[0], -1).any(axis=1)
    rows = jnp.arange(valid.shape[0])
    draws = jax.vmap(lambda i: jax.random.uniform(jax.random.fold_in(key, i)))(rows)
    order = jnp.argsort(jnp.where(valid, draws, 2.0))
    count = jnp.maximum(valid.sum(), 1)
    return order[jnp.arange(size) % count]


def last_and_mean(metrics: dict) -> dict:
    """Per-update metrics `[U]` -> the last update's values, and `<name>_mean` over the U
    updates for the losses (what a learning curve wants)."""
    out = {k: v[-1] for k, v in metrics.items()}
    out.update({f"{k}_mean": v.mean() for k, v in metrics.items() if k.endswith("loss")})
    return out


def prefetch_to_device(batches: Iterable[dict], sharding, size: int = 2) -> Prefetcher:
    """`batches` placed on the devices (host to device once) by a prefetch thread
    (`rljax_offline.runtime.prefetch.Prefetcher`), double-buffered by default, so reading,
    batching, the copy and the update overlap.

    Args:
      batches: host batches (dicts of arrays).
      sharding: a `jax.sharding.Sharding`, or a function that places one batch (e.g.
        `DataParallel.put_sharded`, which builds global arrays in multi-process runs).
      size: how many placed batches wait at most (2: double-buffered).
    """
    put = sharding if callable(sharding) else functools.partial(jax.device_put, device=sharding)
    return Prefetcher(batches, put, size)
