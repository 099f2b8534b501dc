"""`MultiModuleParallel`: every module of a multi-agent algorithm trained in one compiled
program over the devices, with each module's data kept and sampled on the devices.

A group of modules (`learning.multi_module.ModuleGroup`: one `LearningSpec`, no shared
parameters) is stepped by the single-module update under `jax.vmap`; groups of other specs
follow one another inside the same program. Each module samples its own global minibatch
from its own on-device data (`data.device`) exactly as a single-agent run does: module `i`
of a group splits its own RNG for the draw and the examples' keys, so a group of one module
computes the single-agent update of the same data and seed (up to float rounding), and any
device count gives the one-device result.

The state is `{group name: TrainState}`, each with a leading module axis, replicated on
every device; a module's data is sharded along rows. Each group has its own batch size (a
module's rows per update: with RLlib's `count_steps_by="env_steps"` a module that several
agents share draws that many steps of each), so each group places its data with a
`DataParallel` of that size; the devices and the mode are common to all.

On-policy epochs (PPO over several modules, `epochs_on_device`): each module's rollout
columns, replicated, run the single-module epoch program (`DataParallel.epochs_on_device`:
a fresh permutation an epoch, minibatches of the group's batch size) under `vmap` over the
group's modules, every group in the same compiled program.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from rljax_offline.data.device import DeviceData
from rljax_offline.learning.data_parallel import DataParallel, last_and_mean
from rljax_offline.learning.multi_module import (
    ModuleGroup,
    check_policies_to_train,
    keep_untrained,
    make_multi_update,
)
from rljax_offline.learning.update import AXIS

__all__ = ["MultiModuleParallel"]


class MultiModuleParallel:
    """The update of every module over devices (see the module docstring).

    Args:
      groups: `{group name: ModuleGroup}` (`learning.multi_module.group_modules`).
      devices: the devices (one is fine).
      rows_per_update: `{group name: rows of one module's global batch}`; each must divide
        over the devices.
      mode: "shard_map", "pmap" or "jit", as `DataParallel`'s.
      policies_to_train: the modules that train (None: all).
    """

    def __init__(self, groups: Mapping[str, ModuleGroup], devices: list,
                 rows_per_update: Mapping[str, int], *, mode: str = "shard_map",
                 policies_to_train: Collection[str] | None = None):
        self.groups = dict(groups)
        self.dps = {name: DataParallel(group.learning, devices, rows_per_update[name],
                                       mode=mode) for name, group in self.groups.items()}
        self.dp = next(iter(self.dps.values()))  # the mesh, the placement and the mode
        self.devices = devices
        self.trained = check_policies_to_train(self.groups, policies_to_train)
        self._update = make_multi_update(self.groups, policies_to_train,
                                         axis_name=self.dp.axis_name,
                                         grads_summed=mode == "shard_map")
        self._compiled: dict = {}

    def put_replicated(self, tree):
        """The same values on every device (the states)."""
        return self.dp.put_replicated(tree)

    def put_data(self, columns: Mapping[str, dict], episode_lengths: Mapping[str, list]
                 ) -> dict[str, DeviceData]:
        """Each module's learner columns onto the devices, sharded along rows.

        Args:
          columns: `{module_id: {column: array}}`.
          episode_lengths: `{module_id: each episode's row count, in row order}` (for
            sampling whole episodes; None where unknown).

        Returns:
          `{module_id: DeviceData}`.
        """
        out = {}
        for name, group in self.groups.items():
            for module_id in group.module_ids:
                out[module_id] = self.dps[name].put_data(columns[module_id],
                                                         episode_lengths.get(module_id))
        return out

    def _per_device(self, num_updates: int, sample_unit: str, metas: dict):
        datasets = {name: dp.dataset(sample_unit) for name, dp in self.dps.items()}

        def draw(name: str, rng: jax.Array, data: DeviceData):
            """One module's batch and example keys, as `DataParallel` draws them."""
            dp = self.dps[name]
            rng, key = jax.random.split(rng)
            batch = datasets[name].sample(key, data)
            _, key = jax.random.split(rng)
            return rng, batch, dp.my_rows(jax.random.split(key, dp.batch_size))

        def per_device(states, columns, starts, lengths):
            def body(states, _):
                batches, keys, drawn = {}, {}, {}
                for name, group in self.groups.items():
                    rngs, module_batches, module_keys = [], [], []
                    for i, module_id in enumerate(group.module_ids):
                        data = DeviceData(columns[module_id], starts[module_id],
                                          lengths[module_id], *metas[module_id])
                        rng, batch, key = draw(name, states[name].rng[i], data)
                        rngs.append(rng)
                        module_batches.append(batch)
                        module_keys.append(key)
                    drawn[name] = states[name]._replace(rng=jnp.stack(rngs))
                    batches[name] = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs),
                                                           *module_batches)
                    keys[name] = jnp.stack(module_keys)
                return self._update(drawn, batches, keys)

            states, metrics = lax.scan(body, states, None, length=num_updates)
            return states, {m: last_and_mean(v) for m, v in metrics.items()}

        return per_device

    def scan_on_device(self, states: dict, data: Mapping[str, DeviceData], num_updates: int,
                       sample_unit: str = "timesteps") -> tuple[dict, dict]:
        """`num_updates` updates of every module in one `lax.scan`, each module on a global
        minibatch sampled on the devices from its own data; compiled once per count, unit
        and data layout.

        Args:
          states: `{group name: stacked TrainState}`, replicated.
          data: `{module_id: DeviceData}` from `put_data`.
          num_updates: updates in the scan.
          sample_unit: "timesteps" or "episodes" (`data.device`).

        Returns:
          `(states, {module_id: metrics})`, the metrics of each trained module: the last
          update's values and `*_mean` over the updates for the losses.
        """
        if num_updates < 1:
            raise ValueError(f"num_updates must be >= 1, got {num_updates}")
        metas = {m: (d.block_counts, d.block_rows) for m, d in data.items()}
        key = (num_updates, sample_unit, tuple(sorted(metas.items())))
        if key not in self._compiled:
            self._compiled[key] = self.dp.compile_per_device(
                self._per_device(num_updates, sample_unit, metas), (P(AXIS), P(), P()))
        return self._compiled[key](states, {m: d.columns for m, d in data.items()},
                                   {m: d.episode_starts for m, d in data.items()},
                                   {m: d.episode_lengths for m, d in data.items()})

    def epochs_on_device(self, num_epochs: int):
        """`(states, data) -> (states, {module_id: metrics})`: `num_epochs` on-policy epochs
        of every trained module in one program. `data` maps group names to the modules'
        rollout columns stacked on a leading module axis (`[num_modules, rows, ...]`, the
        same rows for each module of a group), replicated; each module runs the
        single-module epochs (`DataParallel.epochs_on_device`) on its own rows with its own
        RNG, under `vmap` over the group. A module outside `policies_to_train` keeps its
        state exactly (a group with none that trains is not computed).

        Args:
          num_epochs: passes over each module's rows.
        """
        if num_epochs < 1:
            raise ValueError(f"num_epochs must be >= 1, got {num_epochs}")
        plans = {}
        for name, group in self.groups.items():
            mask = np.array([m in self.trained for m in group.module_ids])
            plans[name] = (group, mask, self.dps[name]._epoch_steps(num_epochs))

        def per_device(states: dict, data: dict):
            new_states, metrics = dict(states), {}
            for name, (group, mask, epochs) in plans.items():
                if not mask.any():
                    continue
                new, group_metrics = jax.vmap(epochs)(states[name], data[name])
                new_states[name] = keep_untrained(group, mask, new, states[name],
                                                  group_metrics, metrics)
            return new_states, metrics

        return self.dp.compile_per_device(per_device, (P(),))
