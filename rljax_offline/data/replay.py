"""An on-device replay buffer (a ring of transitions) for off-policy online learners (SAC).

`make_replay_buffer(capacity=..., batch_size=...)` checks its arguments once, eagerly, and
returns a frozen `ReplayBuffer` of pure functions (as flashbax's buffers are made; traced
code does no Python-side validation):

* `init(example) -> ReplayState`: zeroed `[capacity, ...]` columns shaped like one row of
  `example` (a dict of `[n, ...]` arrays), write position and fill count 0;
* `add(state, rows, count=None) -> ReplayState`: the first `count` rows of `rows` (all of
  them when None) written at the write position, wrapping around the ring, the oldest rows
  overwritten once it is full. `rows` keeps one shape from call to call (pad it; `count` is
  traced), so one compiled `add` serves every call;
* `sample(state, key) -> batch`: `batch_size` rows drawn uniformly with replacement from the
  filled rows only (never a zero row of an unfilled slot);
* `can_sample(state) -> bool`: whether any row is filled.

All four are `jax.jit`-compatible (`add` donates the old state best: `jax.jit(buffer.add,
donate_argnums=0)` writes in place). Why not flashbax's item buffer: see the SAC guide
(the replay buffer), with the timings of `benchmarks/replay_buffer.py`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=("columns", "position", "size"), meta_fields=())
@dataclasses.dataclass(frozen=True)
class ReplayState:
    """The ring: `columns` (`[capacity, ...]` each), the next write `position` and how many
    rows are filled (`size`, at most the capacity).

    Attributes:
      columns: column name -> `[capacity, ...]` array.
      position: the slot the next row is written to.
      size: how many slots are filled (at most the capacity).
    """

    columns: dict
    position: jax.Array
    size: jax.Array


class ReplayBuffer(NamedTuple):
    """The pure functions of a replay buffer (see the module docstring).

    Attributes:
      init: `init(example) -> ReplayState`, an empty ring shaped like one row of `example`.
      add: `add(state, rows, count=None) -> ReplayState`, writes the first `count` rows.
      sample: `sample(state, key) -> batch`, `batch_size` filled rows drawn uniformly.
      can_sample: `can_sample(state) -> bool`, whether any row is filled.
      capacity: the ring's number of rows.
      batch_size: rows per sample.
    """

    init: Callable[[dict], ReplayState]
    add: Callable[..., ReplayState]
    sample: Callable[[ReplayState, jax.Array], dict]
    can_sample: Callable[[ReplayState], jax.Array]
    capacity: int
    batch_size: int


def make_replay_buffer(*, capacity: int, batch_size: int) -> ReplayBuffer:
    """A uniform replay buffer of `capacity` rows sampling `batch_size` rows at a time;
    a `ValueError` here for a non-positive or non-int argument (never in traced code).

    Args:
      capacity: rows the ring holds; the oldest are overwritten once it is full.
      batch_size: rows each `sample` draws.

    Returns:
      The `ReplayBuffer`.

    Raises:
      ValueError: an argument that is not a positive int.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> buf = make_replay_buffer(capacity=4, batch_size=2)
        >>> state = buf.add(buf.init({"obs": jnp.zeros((1, 3))}), {"obs": jnp.ones((3, 3))})
        >>> int(state.size), buf.sample(state, jax.random.PRNGKey(0))["obs"].shape
        (3, (2, 3))
    """
    for name, v in (("capacity", capacity), ("batch_size", batch_size)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"make_replay_buffer: {name} must be a positive int, got {v!r}")

    def init(example: dict) -> ReplayState:
        columns = jax.tree_util.tree_map(
            lambda x: jnp.zeros((capacity, *jnp.shape(x)[1:]), jnp.asarray(x).dtype), example)
        return ReplayState(columns, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))

    def add(state: ReplayState, rows: dict, count=None) -> ReplayState:
        n = jax.tree_util.tree_leaves(rows)[0].shape[0]
        count = jnp.asarray(n if count is None else count, jnp.int32)
        i = jnp.arange(n, dtype=jnp.int32)
        # Rows past `count` go to index `capacity`, out of bounds: dropped. With more rows than
        # the capacity only the last `capacity` of them could stay; earlier ones are dropped.
        keep = (i < count) & (i >= count - capacity)
        slots = jnp.where(keep, (state.position + i) % capacity, capacity)
        columns = jax.tree_util.tree_map(
            lambda buf, x: buf.at[slots].set(x.astype(buf.dtype), mode="drop"),
            state.columns, rows)
        return ReplayState(columns, (state.position + count) % capacity,
                           jnp.minimum(state.size + count, capacity))

    def sample(state: ReplayState, key: jax.Array) -> dict:
        idx = jax.random.randint(key, (batch_size,), 0, jnp.maximum(state.size, 1))
        return jax.tree_util.tree_map(lambda buf: jnp.take(buf, idx, axis=0), state.columns)

    def can_sample(state: ReplayState) -> jax.Array:
        return state.size > 0

    return ReplayBuffer(init=init, add=add, sample=sample, can_sample=can_sample,
                        capacity=capacity, batch_size=batch_size)
