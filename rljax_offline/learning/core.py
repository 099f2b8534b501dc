"""The learner core: one generic update for every algorithm, written the pmap way.

What the core steps is a `LearningSpec` (`learning.spec`): how to initialise the networks, and an
ordered tuple of `Loss`es,
each a pure `(params, batch, rng) -> (per_example_loss [N], metrics)` with the networks it
optimizes and its optax optimizer (actor, critic, entropy or Lagrange multipliers: as many as
the algorithm has). The core does the rest, for all of them alike:

* gradients w.r.t. each loss's own networks, its optimizer step, in order (a later loss sees the
  params the earlier ones produced, as SAC-style learners do);
* honest reductions: a loss is `sum(per_example * loss_mask) / global_sum(loss_mask)`, the sum
  of the mask `psum`med over devices, so padded rows never count and N devices compute exactly
  the one-device update (up to float summation order) with no device-count scaling; for
  sequence rows (recurrent policies) the mask is `[B, T]` and the mean runs over timesteps;
* Polyak target updates (`targets`, `tau`, `target_update_period`);
* per-example RNG keys sliced like the batch, so randomness does not depend on the sharding.

The per-device update runs in three ways that agree (tests check all three):
`jax.shard_map` with `check_vma=True` over a `("data",)` mesh (the default; JAX's AD then
sums the gradients of replicated params over the axis itself), `jax.pmap` (the gradients are
`psum`med explicitly), and plain `jit` with no axis for one device.

See `learning.spec` for a complete example.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from rljax_offline.learning.spec import LearningSpec, TrainState
from rljax_offline.runtime.background import Background
from rljax_offline.runtime.prefetch import Prefetcher

AXIS = "data"
MODES = ("shard_map", "pmap", "jit")
SAMPLE_UNITS = ("timesteps", "episodes")


# ---------------------------------------------------------------------- reductions


class _Axis(NamedTuple):
    """How the update is being traced: the axis name (None under plain jit) and whether AD
    already sums the gradients of replicated inputs over it (shard_map with check_vma)."""

    name: str | None
    grads_summed: bool

    def psum(self, x):
        return x if self.name is None else lax.psum(x, self.name)

    def sum_grads(self, grads):
        return grads if self.name is None or self.grads_summed else lax.psum(grads, self.name)


_NO_AXIS = _Axis(None, False)
_CURRENT_AXIS: contextvars.ContextVar[_Axis] = contextvars.ContextVar(
    "rljax_offline_axis", default=_NO_AXIS)  # noqa: B039 - an immutable NamedTuple


@contextlib.contextmanager
def _tracing_with(axis: _Axis):
    token = _CURRENT_AXIS.set(axis)
    try:
        yield
    finally:
        _CURRENT_AXIS.reset(token)


def global_sum(x: jax.Array) -> jax.Array:
    """`sum(x)` over the global batch (all devices), inside a learner's losses or prepare."""
    return _CURRENT_AXIS.get().psum(jnp.sum(x))


def global_mean(x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """Masked mean of per-example `x [N]` over the global batch (0 where nothing counts)."""
    m = jnp.ones_like(x) if mask is None else mask.astype(x.dtype)
    return global_sum(x * m) / jnp.maximum(global_sum(m), 1.0)


def per_example_normal(keys: jax.Array, shape: tuple = ()) -> jax.Array:
    """Standard normals `[N, *shape]`, one draw per example key."""
    return jax.vmap(lambda k: jax.random.normal(k, shape))(keys)


def per_example_uniform(keys: jax.Array, shape: tuple = (), minval=0.0, maxval=1.0):
    """Uniforms in `[minval, maxval)`, `[N, *shape]`, one draw per example key."""
    return jax.vmap(lambda k: jax.random.uniform(k, shape, minval=minval, maxval=maxval))(keys)


# ---------------------------------------------------------------------- state and update


# Init runs once: XLA's cheapest backend optimisation compiles it 2-3x faster (the threefry
# and erf_inv of a few layers take seconds at the default level) while its run time stays in
# milliseconds. The values are the same draw up to float rounding (~1 ulp in a few percent
# of the weights, where the default level fuses differently), deterministic per backend.
_INIT_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0}
# On CPU, XLA's older elemental emitters compile the init program in about half the time of its
# fusion emitters (~0.3 instead of ~0.6 CPU-s for a [256, 256] MLP with Adam). Only where the
# installed XLA still has the option: without it, the options above alone.
_INIT_CPU_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False}


def _compile_init(lowered) -> Any:
    """The lowered init program, compiled with the cheapest options this backend takes."""
    if jax.default_backend() == "cpu":
        try:
            return lowered.compile(compiler_options={**_INIT_COMPILER_OPTIONS,
                                                     **_INIT_CPU_COMPILER_OPTIONS})
        except Exception as e:  # noqa: BLE001 - XLA reports an unknown option generically
            if "No such compile option" not in str(e):
                raise
    return lowered.compile(compiler_options=_INIT_COMPILER_OPTIONS)


def init_state(learning: LearningSpec, seed: int = 0, connector_state: Any = ()) -> TrainState:
    """A fresh `TrainState`: online networks, their target copies, one optimizer state per
    loss, the step counter and the algorithm's statistics, all made by one compiled program
    (op-by-op init compiles every small op, one program each)."""
    return _traced_init(learning, seed, connector_state)()


def start_init_state(learning: LearningSpec, seed: int = 0,
                     connector_state: Any = ()) -> Background:
    """`init_state` whose program is traced now, on the caller's thread (so a mistake in the
    spec's `init` raises here), then lowered, compiled and run on a background thread:
    XLA's compile releases the GIL, so the caller reads its data meanwhile. `.result()` is
    the `TrainState` (or the lowering's, compile's or run's error)."""
    return Background(_traced_init(learning, seed, connector_state))


def _traced_init(learning: LearningSpec, seed: int,
                 connector_state: Any) -> Callable[[], TrainState]:
    """The init program, traced; calling the result lowers, compiles and runs it."""

    def init(seed):
        init_key, rng = jax.random.split(jax.random.PRNGKey(seed))
        params = dict(learning.init(init_key))
        for target, online in learning.targets.items():
            params[target] = jax.tree_util.tree_map(jnp.copy, params[online])
        opt_states = {loss.name: loss.optimizer.init(_subset(params, loss.networks))
                      for loss in learning.losses}
        extra = jax.tree_util.tree_map(jnp.asarray, dict(learning.extra_init))
        return params, opt_states, rng, jnp.zeros((), jnp.int32), extra

    _check_learning(learning)
    seed = np.asarray(seed, np.int32)
    traced = jax.jit(init).trace(seed)

    def compile_and_run() -> TrainState:
        compiled = _compile_init(traced.lower())
        params, opt_states, rng, step, extra = compiled(seed)
        return TrainState(params=params, opt_states=opt_states, step=step, rng=rng,
                          connector_state=connector_state, extra=extra)

    return compile_and_run


def _check_learning(learning: LearningSpec) -> None:
    names = [loss.name for loss in learning.losses]
    if len(set(names)) != len(names):
        raise ValueError(f"loss names must be unique (one optimizer state each), got {names}")
    if any(not isinstance(loss.every, int) or loss.every < 1 for loss in learning.losses):
        raise ValueError("Loss.every must be an int >= 1")
    if not 0.0 < learning.tau <= 1.0:
        raise ValueError(f"tau must be in (0, 1], got {learning.tau}")


def _subset(params: dict, names: tuple) -> dict:
    missing = [n for n in names if n not in params]
    if missing:
        raise KeyError(f"a loss optimizes networks {missing} that the spec's init does not "
                       f"create; it has {sorted(params)}")
    return {n: params[n] for n in names}


def _reduce_metrics(metrics: dict, mask: jax.Array) -> dict:
    out = {}
    for k, v in metrics.items():
        v = jnp.asarray(v)
        if v.shape in (mask.shape, (mask.size,)):
            v = v if jnp.issubdtype(v.dtype, jnp.floating) else v.astype(jnp.float32)
            v = global_mean(v.reshape(mask.shape), mask)
        out[k] = v
    return out


def _per_step(loss_name: str, per_example: jax.Array, mask: jax.Array) -> jax.Array:
    """A loss's per-example values shaped like the mask: `[N]` for flat rows; for sequence
    rows (mask `[B, T]`) either `[B, T]` or the same steps flattened, `[B * T]`."""
    if per_example.size != mask.size:
        raise ValueError(f"loss {loss_name!r} returned per-example values of shape "
                         f"{per_example.shape}; the batch's loss_mask is {mask.shape} (one "
                         "value per timestep, flat or [B, T])")
    return per_example.reshape(mask.shape)


def _step_keys(keys: jax.Array, mask: jax.Array) -> jax.Array:
    """Per-row keys `[B, 2]` -> one key per timestep, `mask.shape + (2,)` (`[B, T, 2]` for
    sequence rows: the row's key folded with t)."""
    if mask.ndim == 1:
        return keys
    ts = jnp.arange(mask.shape[1])
    return jax.vmap(lambda k: jax.vmap(lambda t: jax.random.fold_in(k, t))(ts))(keys)


def make_update(learning: LearningSpec, *, axis_name: str | None = AXIS, grads_summed: bool = True):
    """The per-device update `(state, batch) -> (state, metrics)`.

    `batch` is this device's shard of the global batch (a dict of `[n, ...]` arrays with an
    optional `loss_mask`); `axis_name=None` is the single-device form for plain `jit`.
    `grads_summed` says whether AD already sums replicated-param gradients over the axis
    (`shard_map(check_vma=True)`); under `pmap` it is False and they are `psum`med here.
    """
    axis = _Axis(axis_name, grads_summed)

    def update(state: TrainState, batch: dict, example_keys: jax.Array | None = None):
        with _tracing_with(axis):
            n = jax.tree_util.tree_leaves(batch)[0].shape[0]
            rng, key = jax.random.split(state.rng)
            if example_keys is None:  # one device: every example's key from this step's key
                example_keys = jax.random.split(key, n)
            mask = batch.get("loss_mask")
            mask = jnp.ones(n, jnp.float32) if mask is None else mask.astype(jnp.float32)
            batch = {**batch, "loss_mask": mask}
            example_keys = _step_keys(example_keys, mask)
            fold = jnp.vectorize(jax.random.fold_in, signature="(k),()->(k)")
            params, extra = state.params, state.extra
            if learning.prepare is not None:
                batch, extra = learning.prepare(params, extra, batch, fold(example_keys, 0))
            weight = jnp.maximum(axis.psum(mask.sum()), 1.0)
            opt_states, metrics = dict(state.opt_states), {}
            for i, loss in enumerate(learning.losses):
                keys = fold(example_keys, i + 1)

                def objective(sub, loss=loss, keys=keys, params=params):
                    per_example, aux = loss.fn({**params, **sub}, batch, keys)
                    return jnp.sum(_per_step(loss.name, per_example, mask) * mask) / weight, aux

                sub = _subset(params, loss.networks)
                (_, aux), grads = jax.value_and_grad(objective, has_aux=True)(sub)
                grads = axis.sum_grads(grads)
                updates, opt_state = loss.optimizer.update(grads, opt_states[loss.name], sub)
                new_sub = optax.apply_updates(sub, updates)
                if loss.every > 1:
                    due = (state.step + 1) % loss.every == 0
                    keep = lambda new, old, due=due: jax.tree_util.tree_map(
                        lambda n, o: jnp.where(due, n, o), new, old)
                    new_sub = keep(new_sub, sub)
                    opt_state = keep(opt_state, opt_states[loss.name])
                opt_states[loss.name] = opt_state
                params = {**params, **new_sub}
                metrics.update(_reduce_metrics(aux, mask))
                metrics[f"gradients_{loss.name}_global_norm"] = optax.tree.norm(grads)
            step = state.step + 1
            if learning.targets:
                params = _update_targets(params, learning, step)
            metrics["num_module_steps_trained"] = axis.psum(mask.sum())
        return TrainState(params=params, opt_states=opt_states, step=step, rng=rng,
                          connector_state=state.connector_state, extra=extra), metrics

    return update


def _update_targets(params: dict, learning: LearningSpec, step: jax.Array) -> dict:
    period, tau = learning.target_update_period, learning.tau
    due = (step % period) == 0 if period > 1 else True
    params = dict(params)
    for target, online in learning.targets.items():
        new = jax.tree_util.tree_map(lambda o, t: tau * o + (1.0 - tau) * t,
                                     params[online], params[target])
        params[target] = new if period == 1 else jax.tree_util.tree_map(
            lambda n, t: jnp.where(due, n, t), new, params[target])
    return params


# ---------------------------------------------------------------------- devices


def select_devices(num_devices: int | str = "all") -> list:
    """The devices the learner runs on: this process's first `num_devices` local ones, or,
    in a multi-process run (`jax.distributed`), every device of every process."""
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


# ---------------------------------------------------------------------- device-resident data


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=("columns", "episode_starts", "episode_lengths"),
                   meta_fields=("block_counts", "block_rows"))
@dataclasses.dataclass(frozen=True)
class DeviceData:
    """Learner columns kept on the devices, sharded along rows (each device holds
    `rows / num_devices` of them, not a copy of all).

    The rows are laid out in blocks, one a process (one block in a single-process run):
    block `p` holds that process's `block_counts[p]` rows, then zero padding up to
    `block_rows`. A "valid row" `g` in `[0, num_rows)` counts the real rows across blocks in
    order; the samplers draw valid rows and map them to their padded positions, so padding
    is never drawn and the draw does not depend on how many devices or processes hold it.

    `episode_starts` / `episode_lengths` (replicated, `[E]`): each episode's first valid row
    and its length, for episode sampling (empty when unknown).
    """

    columns: dict
    episode_starts: jax.Array
    episode_lengths: jax.Array
    block_counts: tuple
    block_rows: int

    @property
    def num_rows(self) -> int:
        return int(sum(self.block_counts))

    @property
    def num_episodes(self) -> int:
        return int(self.episode_lengths.shape[0])


def sample_valid_rows(key: jax.Array, batch_size: int, num_rows: int,
                      episode_starts: jax.Array | None = None,
                      episode_lengths: jax.Array | None = None,
                      unit: str = "timesteps") -> jax.Array:
    """`batch_size` valid-row indices in `[0, num_rows)`, drawn on the device.

    One sampler for both units:
    * "timesteps" (RLlib's default): rows uniformly with replacement;
    * "episodes": episodes uniformly with replacement, each contributing its rows in order
      from its start, concatenated until the batch is full (the last one cut), so a batch
      holds whole stretches of behaviour, as an episode buffer gives them.
    Fixed shapes throughout (`batch_size` episode draws always suffice: each has >= 1 row).
    """
    if unit == "timesteps":
        return jax.random.randint(key, (batch_size,), 0, num_rows)
    if unit != "episodes":
        raise ValueError(f"sample unit must be one of {SAMPLE_UNITS}, got {unit!r}")
    eps = jax.random.randint(key, (batch_size,), 0, episode_lengths.shape[0])
    lens = episode_lengths[eps]
    ends = jnp.cumsum(lens)
    j = jnp.arange(batch_size)
    k = jnp.searchsorted(ends, j, side="right")
    return episode_starts[eps[k]] + j - (ends[k] - lens[k])


def _padded_positions(valid: jax.Array, block_counts: tuple, block_rows: int) -> jax.Array:
    """Valid-row indices -> positions in the block layout of `DeviceData`."""
    if len(block_counts) == 1:
        return valid
    counts = jnp.asarray(block_counts, valid.dtype)
    ends = jnp.cumsum(counts)
    block = jnp.searchsorted(ends, valid, side="right")
    return block * block_rows + valid - (ends[block] - counts[block])


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
    from jax.experimental import multihost_utils

    values = np.asarray(values, np.int64)
    sizes = multihost_utils.process_allgather(np.asarray([values.size], np.int64))
    width = max(int(sizes.max()), 1)
    padded = np.zeros(width, np.int64)
    padded[:values.size] = values
    gathered = multihost_utils.process_allgather(padded)
    return [gathered[p, :int(sizes[p, 0])] for p in range(len(sizes))]


class DataParallel:
    """Runs a learner's per-device update over devices (one process's, or, under
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
        self.batch_size, self.per_device = global_batch_size, global_batch_size // n
        self.local_batch_size = global_batch_size // self.process_count
        self.mesh = Mesh(np.asarray(devices), (AXIS,))
        self.replicated = NamedSharding(self.mesh, P())
        self.sharded = NamedSharding(self.mesh, P(AXIS))
        self._update = make_update(learning, axis_name=None if mode == "jit" else AXIS,
                                   grads_summed=mode == "shard_map")

    # -------------------------------------------------------------- placement

    def put_replicated(self, tree):
        """The same values on every device (every process passes the whole tree)."""
        return _put(tree, self.replicated, self.multi_process)

    def put_sharded(self, tree):
        """One global batch, sharded on rows; each process passes its own
        `local_batch_size` rows (all of them in a single-process run)."""
        return _put(tree, self.sharded, self.multi_process)

    def put_data(self, columns: dict, episode_lengths=None) -> DeviceData:
        """Materialized learner columns onto the devices, once, sharded along rows.

        Each process passes its own rows (the episodes it read) and, for episode sampling,
        the lengths of its episodes in row order. Rows are padded with zeros to a multiple
        of the local device count; the padding is never sampled."""
        leaves = jax.tree_util.tree_leaves(columns)
        n = len(leaves[0])
        if any(len(x) != n for x in leaves):
            raise ValueError(f"learner columns differ in length: {[len(x) for x in leaves]}")
        lengths = np.asarray([] if episode_lengths is None else episode_lengths, np.int64)
        if lengths.size and (lengths.min() < 1 or lengths.sum() != n):
            raise ValueError(f"episode_lengths must be >= 1 and sum to the {n} rows, got sum "
                             f"{int(lengths.sum())}")
        if self.multi_process:
            counts = tuple(int(c[0]) for c in _allgather_ints(np.asarray([n])))
            all_lengths = _allgather_ints(lengths)
            if any(a.size == 0 for a in all_lengths) and any(a.size for a in all_lengths):
                raise ValueError("episode_lengths given on some processes only")
            lengths = np.concatenate(all_lengths)
        else:
            counts = (n,)
        if sum(counts) == 0:
            raise ValueError("no rows to put on the devices")
        local = len(self.local_devices)
        block = max(-(-max(counts) // local) * local, local)
        padded = jax.tree_util.tree_map(
            lambda x: np.concatenate([np.asarray(x), np.zeros((block - n, *np.shape(x)[1:]),
                                                              np.asarray(x).dtype)]), columns)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if lengths.size else lengths
        return DeviceData(columns=self.put_sharded(padded),
                          episode_starts=self.put_replicated(starts.astype(np.int32)),
                          episode_lengths=self.put_replicated(lengths.astype(np.int32)),
                          block_counts=counts, block_rows=block)

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

    def _my_rows(self, idx: jax.Array) -> jax.Array:
        """This device's slice of a global index vector (all of it with no axis)."""
        if self.mode == "jit":
            return idx
        return lax.dynamic_slice_in_dim(idx, lax.axis_index(AXIS) * self.per_device,
                                        self.per_device)

    def _gather_rows(self, shard: dict, positions: jax.Array) -> dict:
        """This device's slice of the global batch at `positions` (every device holds the
        same `[B]` vector) from row-sharded data: each device takes the rows it owns (zeros
        elsewhere) and a reduce-scatter sums them into each device's slice. Exactly one
        term of each sum is non-zero, so the rows arrive bit for bit."""
        if self.mode == "jit":
            return jax.tree_util.tree_map(lambda x: jnp.take(x, positions, axis=0), shard)
        rows = jax.tree_util.tree_leaves(shard)[0].shape[0]
        local = positions - lax.axis_index(AXIS) * rows
        owned = (local >= 0) & (local < rows)
        local = jnp.clip(local, 0, rows - 1)

        def one(x):
            mine = jnp.take(x, local, axis=0)
            wide = mine.astype(jnp.int32) if mine.dtype == jnp.bool_ else mine
            wide = jnp.where(owned.reshape(-1, *[1] * (x.ndim - 1)), wide, 0)
            out = lax.psum_scatter(wide, AXIS, scatter_dimension=0, tiled=True)
            return out.astype(x.dtype)

        return jax.tree_util.tree_map(one, shard)

    def _step_with_keys(self, state: TrainState, batch: dict):
        """One update whose per-example keys come from the global batch's key vector, so
        every sharding gives each example the same key."""
        _, key = jax.random.split(state.rng)
        keys = self._my_rows(jax.random.split(key, self.batch_size))
        return self._update(state, batch, keys)

    def _sample_steps(self, num_updates: int, unit: str, block_counts: tuple,
                      block_rows: int):
        B, num_rows = self.batch_size, int(sum(block_counts))

        def per_device(state, shard, starts, lengths):
            def body(state, _):
                rng, key = jax.random.split(state.rng)
                valid = sample_valid_rows(key, B, num_rows, starts, lengths, unit)
                batch = self._gather_rows(
                    shard, _padded_positions(valid, block_counts, block_rows))
                return self._step_with_keys(state._replace(rng=rng), batch)

            state, metrics = lax.scan(body, state, None, length=num_updates)
            return state, _last_and_mean(metrics)

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
                        lambda x: jnp.take(x, self._my_rows(idx), axis=0), data)
                    return self._step_with_keys(state, batch)

                return lax.scan(minibatch, state._replace(rng=rng),
                                order.reshape(num_minibatches, B))

            state, metrics = lax.scan(epoch, state, None, length=num_epochs)
            metrics = jax.tree_util.tree_map(lambda x: x.reshape(-1, *x.shape[2:]), metrics)
            return state, _last_and_mean(metrics)

        return per_device

    def _compile(self, per_device, arg_specs: tuple):
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
        return self._compile(self._step_with_keys, (P(AXIS),))

    def scan_on_device(self, num_updates: int, sample_unit: str = "timesteps"):
        """`(state, data) -> (state, metrics)`: `num_updates` updates in one `lax.scan`, each
        on a global minibatch sampled on the device (`sample_valid_rows`) from `data`, a
        `DeviceData` from `put_data` (a dict of equal-length host arrays is put there
        first). Every device draws the same indices and gathers its slice of the batch from
        the row-sharded data (`_gather_rows`), so any device or process count gives the
        one-device result. Metrics: the last update's, plus `*_mean` over all."""
        if sample_unit not in SAMPLE_UNITS:
            raise ValueError(f"sample_unit must be one of {SAMPLE_UNITS}, got {sample_unit!r}")
        compiled: dict = {}

        def run(state, data):
            if not isinstance(data, DeviceData):
                data = self.put_data(jax.device_get(data))
            if sample_unit == "episodes" and data.num_episodes == 0:
                raise ValueError("sample_unit='episodes' needs put_data(..., episode_lengths)")
            meta = (data.block_counts, data.block_rows)
            if meta not in compiled:
                compiled[meta] = self._compile(
                    self._sample_steps(num_updates, sample_unit, *meta), (P(AXIS), P(), P()))
            return compiled[meta](state, data.columns, data.episode_starts,
                                  data.episode_lengths)

        return run

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
        return self._compile(self._epoch_steps(num_epochs, num_minibatches), (P(),))

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
        return state, _last_and_mean(stacked)


def _cyclic_valid_order(key: jax.Array, loss_mask: jax.Array, size: int) -> jax.Array:
    """`size` row indices: the rows with a valid step in a random order (one uniform draw
    per row index, so padding rows appended change nothing), repeated cyclically."""
    valid = loss_mask.reshape(loss_mask.shape[0], -1).any(axis=1)
    rows = jnp.arange(valid.shape[0])
    draws = jax.vmap(lambda i: jax.random.uniform(jax.random.fold_in(key, i)))(rows)
    order = jnp.argsort(jnp.where(valid, draws, 2.0))
    count = jnp.maximum(valid.sum(), 1)
    return order[jnp.arange(size) % count]


def _last_and_mean(metrics: dict) -> dict:
    """Per-update metrics `[U]` -> the last update's values, and `<name>_mean` over the U
    updates for the losses (what a learning curve wants)."""
    out = {k: v[-1] for k, v in metrics.items()}
    out.update({f"{k}_mean": v.mean() for k, v in metrics.items() if k.endswith("loss")})
    return out


# ---------------------------------------------------------------------- streaming


def prefetch_to_device(batches: Iterable[dict], sharding, size: int = 2) -> Prefetcher:
    """`batches` placed on the devices (host to device once) by a prefetch thread
    (`rljax_offline.runtime.prefetch.Prefetcher`), double-buffered by default, so reading, batching,
    the copy and the update overlap.

    `sharding`: a `jax.sharding.Sharding`, or a function that places one batch (e.g.
    `DataParallel.put_sharded`, which builds global arrays in multi-process runs)."""
    put = sharding if callable(sharding) else functools.partial(jax.device_put, device=sharding)
    return Prefetcher(batches, put, size)
