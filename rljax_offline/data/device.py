"""The on-device dataset: learner columns kept on the devices, sharded along rows, and sampled
there, inside the jitted update loop.

`make_device_dataset(...)` checks its arguments once, eagerly, and returns a frozen
`DeviceDataset` of two pure functions (as flashbax's buffers are made):

* `put(columns, episode_lengths=None) -> DeviceData` (host side, once): the rows padded to a
  whole number of rows per device and placed sharded; in a multi-process run each process
  passes its own rows and the layout is agreed over all of them;
* `sample(key, data) -> batch` (traced, per device): one global minibatch of
  `batch_size` valid rows drawn on the device (`sample_valid_rows`), this device's slice of it
  gathered from the row-sharded data (`gather_rows`); for a sequence model, `batch_size`
  context windows of `window` steps cut on the device from the episodes' steps
  (`sample_windows`).

Every device draws the same indices, so any device or process count gives the one-device
batch, bit for bit. Traced code does no Python-side validation.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

SAMPLE_UNITS = ("timesteps", "episodes", "windows")


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
    order; the sampler draws valid rows and maps them to their padded positions, so padding
    is never drawn and the draw does not depend on how many devices or processes hold it.

    `episode_starts` / `episode_lengths` (replicated, `[E]`): each episode's first valid row
    and its length, for episode sampling (empty when unknown).

    Attributes:
      columns: column name -> the rows, sharded on axis 0 over the devices.
      episode_starts: `[E]` each episode's first valid row.
      episode_lengths: `[E]` each episode's length.
      block_counts: the real rows of each process's block.
      block_rows: the rows of every block, padding included.
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

    Args:
      key: the PRNG key.
      batch_size: rows to draw.
      num_rows: the valid rows.
      episode_starts: `[E]` each episode's first valid row ("episodes" only).
      episode_lengths: `[E]` each episode's length ("episodes" only).
      unit: "timesteps" or "episodes".
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


def sample_windows(key: jax.Array, num_windows: int, window: int, num_rows: int,
                   episode_starts: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`num_windows` context windows of at most `window` consecutive steps of one episode,
    each ending at a valid row drawn uniformly with replacement (so every step is a window's
    last as often as any other, as d3rlpy's trajectory slicer draws them) and starting
    `window - 1` steps before it, or at its episode's first step. Returns the valid-row
    indices `[num_windows, window]` and the mask of the steps each holds; a window is
    right-padded (its padding repeats its last row, masked), so under a causal model no held
    step sees padding.

    Args:
      key: the PRNG key.
      num_windows: windows to draw.
      window: steps of a full window (the model's context).
      num_rows: the valid rows (all episodes' steps, episode after episode).
      episode_starts: `[E]` each episode's first valid row, ascending (the next one's
        start ends each).
    """
    ends = jax.random.randint(key, (num_windows,), 0, num_rows)
    episode = jnp.searchsorted(episode_starts, ends, side="right") - 1
    first = jnp.maximum(episode_starts[episode], ends - (window - 1))
    steps = jnp.arange(window)
    held = steps[None, :] <= (ends - first)[:, None]
    return jnp.where(held, first[:, None] + steps[None, :], ends[:, None]), held


def padded_positions(valid: jax.Array, block_counts: tuple, block_rows: int) -> jax.Array:
    """Valid-row indices -> positions in the block layout of `DeviceData`.

    Args:
      valid: valid-row indices.
      block_counts: the real rows of each block.
      block_rows: the rows of every block, padding included.
    """
    if len(block_counts) == 1:
        return valid
    counts = jnp.asarray(block_counts, valid.dtype)
    ends = jnp.cumsum(counts)
    block = jnp.searchsorted(ends, valid, side="right")
    return block * block_rows + valid - (ends[block] - counts[block])


def device_slice(x: jax.Array, axis_name: str | None) -> jax.Array:
    """This device's slice, along axis 0, of an array every device holds whole (all of it
    with no axis): the slice `gather_rows` gives each device of the rows at the same
    positions.

    Args:
      x: the array, the same on every device.
      axis_name: the device axis (None: one device).
    """
    if axis_name is None:
        return x
    size = x.shape[0] // lax.axis_size(axis_name)
    return lax.dynamic_slice_in_dim(x, lax.axis_index(axis_name) * size, size)


def gather_rows(shard: dict, positions: jax.Array, axis_name: str | None) -> dict:
    """This device's slice of the global batch at `positions` (every device holds the same
    `[B]` vector) from row-sharded data: each device takes the rows it owns (zeros
    elsewhere) and a reduce-scatter over `axis_name` sums them into each device's slice.
    Exactly one term of each sum is non-zero, so the rows arrive bit for bit. With no axis
    (one device, plain jit) the rows are taken directly.

    Args:
      shard: this device's rows, column name -> array.
      positions: `[B]` the global batch's positions (the same on every device).
      axis_name: the device axis (None: one device).
    """
    if axis_name is None:
        return jax.tree_util.tree_map(lambda x: jnp.take(x, positions, axis=0), shard)
    rows = jax.tree_util.tree_leaves(shard)[0].shape[0]
    local = positions - lax.axis_index(axis_name) * rows
    owned = (local >= 0) & (local < rows)
    local = jnp.clip(local, 0, rows - 1)

    def one(x):
        mine = jnp.take(x, local, axis=0)
        wide = mine.astype(jnp.int32) if mine.dtype == jnp.bool_ else mine
        wide = jnp.where(owned.reshape(-1, *[1] * (x.ndim - 1)), wide, 0)
        out = lax.psum_scatter(wide, axis_name, scatter_dimension=0, tiled=True)
        return out.astype(x.dtype)

    return jax.tree_util.tree_map(one, shard)


def check_episodes(sample_unit: str, data: DeviceData) -> None:
    """A clear error where the unit draws by episode and `data` was put without the
    episodes' lengths.

    Args:
      sample_unit: the sampler's unit.
      data: the data it samples.
    """
    if sample_unit in ("episodes", "windows") and data.num_episodes == 0:
        raise ValueError(f"sample_unit={sample_unit!r} needs put_data(..., episode_lengths)")


class DeviceDataset(NamedTuple):
    """The pure functions of an on-device dataset (see the module docstring).

    Attributes:
      put: `(columns, episode_lengths=None) -> DeviceData`, on the host.
      sample: `(key, data) -> batch`, traced inside the per-device program: this device's
        slice of one global minibatch (of windows: `[n, window, ...]` columns with their
        `loss_mask` and `seq_lens`).
    """

    put: Callable[..., DeviceData]
    sample: Callable[[jax.Array, DeviceData], dict]


def make_device_dataset(*, batch_size: int, num_local_devices: int,
                        put_sharded: Callable[[Any], Any],
                        put_replicated: Callable[[Any], Any],
                        axis_name: str | None, sample_unit: str = "timesteps",
                        allgather: Callable[[np.ndarray], list[np.ndarray]] | None = None,
                        window: int | None = None) -> DeviceDataset:
    """An on-device dataset; every argument is checked here, none in traced code.

    Args:
      batch_size: rows of one global minibatch (over all devices).
      num_local_devices: this process's devices: rows are padded to a multiple of it.
      put_sharded: places a host pytree on the devices, sharded on rows (the runtime's
        placement; in a multi-process run each process passes its own rows and gets global
        arrays).
      put_replicated: places a host pytree on the devices, the same on every device.
      axis_name: the device axis the sample runs under (None: one device, plain jit).
      sample_unit: "timesteps" or "episodes" (see `sample_valid_rows`), or "windows"
        (`batch_size` windows, see `sample_windows`).
      allgather: in a multi-process run, `int vector -> every process's vector` (in process
        order); None in a single-process run.
      window: steps of one window ("windows" only).
    """
    if sample_unit not in SAMPLE_UNITS:
        raise ValueError(f"sample_unit must be one of {SAMPLE_UNITS}, got {sample_unit!r}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if not isinstance(num_local_devices, int) or num_local_devices < 1:
        raise ValueError(f"num_local_devices must be a positive int, got {num_local_devices!r}")
    if sample_unit == "windows" and (not isinstance(window, int) or window < 1):
        raise ValueError(f"sample_unit='windows' needs window, a positive int, got {window!r}")

    def put(columns: dict, episode_lengths=None) -> DeviceData:
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
        if allgather is not None:
            counts = tuple(int(c[0]) for c in allgather(np.asarray([n])))
            all_lengths = allgather(lengths)
            if any(a.size == 0 for a in all_lengths) and any(a.size for a in all_lengths):
                raise ValueError("episode_lengths given on some processes only")
            lengths = np.concatenate(all_lengths)
        else:
            counts = (n,)
        if sum(counts) == 0:
            raise ValueError("no rows to put on the devices")
        local = num_local_devices
        block = max(-(-max(counts) // local) * local, local)
        padded = jax.tree_util.tree_map(
            lambda x: np.concatenate([np.asarray(x), np.zeros((block - n, *np.shape(x)[1:]),
                                                              np.asarray(x).dtype)]), columns)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if lengths.size else lengths
        return DeviceData(columns=put_sharded(padded),
                          episode_starts=put_replicated(starts.astype(np.int32)),
                          episode_lengths=put_replicated(lengths.astype(np.int32)),
                          block_counts=counts, block_rows=block)

    def sample(key: jax.Array, data: DeviceData) -> dict:
        if sample_unit == "windows":
            return sample_window_batch(key, data)
        valid = sample_valid_rows(key, batch_size, data.num_rows, data.episode_starts,
                                  data.episode_lengths, sample_unit)
        positions = padded_positions(valid, data.block_counts, data.block_rows)
        return gather_rows(data.columns, positions, axis_name)

    def sample_window_batch(key: jax.Array, data: DeviceData) -> dict:
        valid, held = sample_windows(key, batch_size, window, data.num_rows,
                                     data.episode_starts)
        positions = padded_positions(valid.reshape(-1), data.block_counts, data.block_rows)
        rows = gather_rows(data.columns, positions, axis_name)
        held = device_slice(held, axis_name)

        def as_windows(x):
            x = x.reshape(held.shape + x.shape[1:])
            return jnp.where(held.reshape(held.shape + (1,) * (x.ndim - 2)), x,
                             jnp.zeros((), x.dtype))

        return {**jax.tree_util.tree_map(as_windows, rows), "loss_mask": held,
                "seq_lens": held.sum(axis=1, dtype=jnp.int32)}

    return DeviceDataset(put=put, sample=sample)
