"""N independent runs in one compiled program: the train state gets a leading seed axis and
the update program is `jax.vmap`ped over it.

Each seed has its own params, optimizer states and RNG (so its own minibatch draws); the
data is shared (materialized once on the devices). `init_seed_states(learning, seeds)` makes
the stacked state, seed `i` equal to `init_state(learning, seeds[i])`; `scan_over_seeds(dp,
n)` is `DataParallel.scan_on_device` over that axis: one program, where N runs one after
another compile and dispatch N times and keep the cores busy with one small update at a
time. Data parallelism over devices stays as it is (`shard_map` or `jit`; the seed axis is
inside each device's program). `seed_slice(state, i)` takes one run out (to export, evaluate
or checkpoint it alone).

In float64 every seed's result equals its separate run up to summation order
(`tests/test_seeds.py`, every registered algorithm); in float32, batched matrix products may
round differently, and Adam amplifies that over many updates as it does across devices.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from rljax_offline.data.device import DeviceData, check_episodes
from rljax_offline.learning.data_parallel import DataParallel
from rljax_offline.learning.init import _compile_init, _init_parts, check_learning_spec
from rljax_offline.learning.spec import LearningSpec, TrainState
from rljax_offline.learning.update import AXIS


def init_seed_states(learning: LearningSpec, seeds: Sequence[int],
                     connector_state: Any = ()) -> TrainState:
    """The `TrainState`s of `seeds`, stacked on a leading axis (one compiled program).

    Args:
      learning: the algorithm's `LearningSpec`.
      seeds: one seed per run; seed `i`'s state equals `init_state(learning, seeds[i])`.
      connector_state: the learner connector state, copied to every seed.
    """
    check_learning_spec(learning)
    seeds = np.asarray(list(seeds), np.int32)
    if seeds.ndim != 1 or len(seeds) < 1:
        raise ValueError(f"seeds must be a non-empty list of ints, got {seeds!r}")
    # compiled as `init_state`'s program is (the same options: the same draw to the bit)
    traced = jax.jit(jax.vmap(functools.partial(_init_parts, learning))).trace(seeds)
    params, opt_states, rng, step, extra = _compile_init(traced.lower())(seeds)
    stacked = jax.tree_util.tree_map(
        lambda x: np.broadcast_to(np.asarray(x), (len(seeds), *np.shape(x))),
        jax.device_get(connector_state))
    return TrainState(params=params, opt_states=opt_states, step=step, rng=rng,
                      connector_state=stacked, extra=extra)


def seed_slice(state: Any, i: int) -> Any:
    """Seed `i`'s state (or metrics) of a stacked tree.

    Args:
      state: a tree with a leading seed axis.
      i: the seed's index.
    """
    return jax.tree_util.tree_map(lambda x: x[i], state)


def scan_over_seeds(dp: DataParallel, num_updates: int, sample_unit: str = "timesteps",
                    window: int | None = None):
    """`(states, data) -> (states, metrics)`: `DataParallel.scan_on_device` for every seed of
    a stacked state in one program; metrics get the seed axis too. The data (a `DeviceData`
    from `dp.put_data`) is shared by all seeds.

    Args:
      dp: the data-parallel runtime (mode `shard_map` or `jit`).
      num_updates: updates per call.
      sample_unit: `DataParallel.dataset`'s unit ("timesteps", "episodes" or "windows").
      window: steps of a window ("windows" only).
    """
    if dp.mode == "pmap":
        raise ValueError("seeds in one program run under shard_map or jit (mode='pmap' maps "
                         "the device axis itself)")
    dataset = dp.dataset(sample_unit, window)
    compiled: dict = {}

    def build(meta):
        per_device = dp._sample_steps(num_updates, dataset, *meta)
        over_seeds = jax.vmap(per_device, in_axes=(0, None, None, None))
        if dp.mode == "jit":
            return jax.jit(over_seeds, donate_argnums=0)
        f = jax.shard_map(over_seeds, mesh=dp.mesh, in_specs=(P(), P(AXIS), P(), P()),
                          out_specs=(P(), P()), check_vma=True)
        return jax.jit(f, donate_argnums=0)

    def run(states: TrainState, data: DeviceData):
        check_episodes(sample_unit, data)
        meta = (data.block_counts, data.block_rows)
        if meta not in compiled:
            compiled[meta] = build(meta)
        return compiled[meta](states, data.columns, data.episode_starts,
                              data.episode_lengths)

    run.programs = compiled  # the jitted programs by data layout (to inspect their cost)
    return run
