"""Several modules learned in one compiled update: RLlib's `MultiRLModule`, without its
Python loop over modules.

Modules are grouped by their `LearningSpec`: every module of a group has the same networks
and shapes (agents with the same spaces and config that do not share parameters), and the
group's state is one `TrainState` with a leading module axis, stepped by the single-module
update (`learning.update.make_update`) under `jax.vmap`. Groups of different specs
(heterogeneous agents: other spaces, other algorithms) are stepped one after the other inside
the same program. Parameter sharing is not a group of several modules but one module whose
batch holds the rows of every agent mapped to it.

`policies_to_train` is honoured per module: a module left out keeps its params, optimizer
state and statistics exactly (its update is computed with the group's and discarded by a
select, so the program is the same whichever modules train).

The update is algorithm-agnostic: every registered algorithm's `LearningSpec` trains per module
without multi-agent code of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline.learning.init import init_state
from rljax_offline.learning.spec import LearningSpec, TrainState
from rljax_offline.learning.update import AXIS, make_update


class ModuleGroup(NamedTuple):
    """Modules that share a `LearningSpec` but not parameters (see the module docstring).

    Attributes:
        learning: the spec every module of the group is stepped with.
        module_ids: the modules, in the order of the group state's leading axis.
    """

    learning: LearningSpec
    module_ids: tuple[str, ...]


def group_modules(specs: Mapping[str, LearningSpec],
                  rows: Mapping[str, int] | None = None) -> dict[str, ModuleGroup]:
    """Groups the modules built from one spec object (the caller builds one spec per
    distinct spaces and config) and, where given, one batch size.

    Args:
        specs: `{module_id: LearningSpec}`.
        rows: `{module_id: rows of its batch}` (None: all alike); modules of one spec but
            other batch sizes cannot be stacked, so they form groups of their own.

    Returns:
        `{group name: ModuleGroup}`, each group named by its first module.
    """
    groups: dict[tuple, list[str]] = {}
    for module_id, spec in specs.items():
        key = (id(spec), None if rows is None else rows[module_id])
        groups.setdefault(key, []).append(module_id)
    return {ids[0]: ModuleGroup(specs[ids[0]], tuple(ids)) for ids in groups.values()}


def init_multi_state(groups: Mapping[str, ModuleGroup], seed: int = 0,
                     connector_states: Mapping[str, Any] | None = None
                     ) -> dict[str, TrainState]:
    """Each group's `TrainState`, its modules stacked on a leading axis.

    Args:
        groups: from `group_modules`.
        seed: the first module's seed; the others take `seed + 1`, `seed + 2`, ... over all
            modules in order (module `i` overall is `init_state(learning, seed + i)`), so no
            two modules start from the same draw.
        connector_states: `{module_id: its learner connector state}` (None: none).
    """
    states, offset = {}, 0
    cstates = connector_states or {}
    for name, group in groups.items():
        per_module = [init_state(group.learning, seed + offset + i, cstates.get(m, ()))
                      for i, m in enumerate(group.module_ids)]
        offset += len(group.module_ids)
        states[name] = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *per_module)
    return states


def unstack(groups: Mapping[str, ModuleGroup], states: Mapping[str, Any]) -> dict[str, Any]:
    """One tree per module from per-group stacked trees.

    Args:
        groups: from `group_modules`.
        states: `{group name: tree with a leading module axis}` (states or metrics).

    Returns:
        `{module_id: that module's slice}`.
    """
    return {module_id: jax.tree_util.tree_map(lambda x, i=i: x[i], states[name])
            for name, group in groups.items() for i, module_id in enumerate(group.module_ids)}


def check_policies_to_train(groups: Mapping[str, ModuleGroup],
                            policies_to_train: Collection[str] | None) -> frozenset[str]:
    """The modules that train.

    Args:
        groups: from `group_modules`.
        policies_to_train: module ids (RLlib's name); None: every module.

    Raises:
        ValueError: naming modules that do not exist, or naming none.
    """
    known = {m for g in groups.values() for m in g.module_ids}
    if policies_to_train is None:
        return frozenset(known)
    chosen = frozenset(policies_to_train)
    unknown = sorted(chosen - known)
    if unknown:
        raise ValueError(f"policies_to_train names modules {unknown} that do not exist; "
                         f"modules: {sorted(known)}")
    if not chosen:
        raise ValueError(f"policies_to_train names no module; modules: {sorted(known)}")
    return chosen


def keep_untrained(group: ModuleGroup, mask: np.ndarray, new: Any, old: Any,
                   group_metrics: Any, metrics: dict) -> Any:
    """A group's state after its `vmap`ped step: each module outside `policies_to_train`
    (`mask` False) keeps `old` exactly; each trained module's slice of `group_metrics` goes
    into `metrics` under its id.

    Args:
      group: the stacked modules.
      mask: `[num_modules]` bool, which of them train.
      new: the group's stacked state after the step.
      old: the group's stacked state before it.
      group_metrics: the step's metrics, leaves `[num_modules, ...]`.
      metrics: `{module_id: metrics}`, filled in.
    """
    if not mask.all():
        new = jax.tree_util.tree_map(
            lambda n, o: jnp.where(mask.reshape(-1, *[1] * (n.ndim - 1)), n, o), new, old)
    for i, module_id in enumerate(group.module_ids):
        if mask[i]:
            metrics[module_id] = jax.tree_util.tree_map(lambda x, i=i: x[i], group_metrics)
    return new


def make_multi_update(groups: Mapping[str, ModuleGroup],
                      policies_to_train: Collection[str] | None = None, *,
                      axis_name: str | None = AXIS, grads_summed: bool = True
                      ) -> Callable[..., tuple[dict, dict]]:
    """The per-device update of every module.

    Args:
        groups: from `group_modules`.
        policies_to_train: the modules that train (None: all; `check_policies_to_train`).
        axis_name: the device axis, as `make_update`'s (None: plain jit, one device).
        grads_summed: whether AD already sums replicated gradients, as `make_update`'s.

    Returns:
        `(states, batches, example_keys=None) -> (states, metrics)`: `states` and `batches`
        map group names to a stacked `TrainState` and a batch whose leaves are
        `[num_modules, rows, ...]` (each module its own rows; `example_keys` likewise
        `{group: [num_modules, rows, 2]}` or None); `metrics` maps each trained module id to
        its metrics.
    """
    trained = check_policies_to_train(groups, policies_to_train)
    plans = {}
    for name, group in groups.items():
        mask = np.array([m in trained for m in group.module_ids])
        update = make_update(group.learning, axis_name=axis_name, grads_summed=grads_summed)
        plans[name] = (group, mask, update)

    def multi_update(states: dict, batches: dict, example_keys: dict | None = None):
        new_states, metrics = {}, {}
        for name, (group, mask, update) in plans.items():
            if not mask.any():  # nothing of this group trains: not even computed
                new_states[name] = states[name]
                continue
            keys = None if example_keys is None else example_keys[name]
            new, group_metrics = jax.vmap(update, in_axes=(0, 0, None if keys is None else 0))(
                states[name], batches[name], keys)
            new_states[name] = keep_untrained(group, mask, new, states[name], group_metrics,
                                              metrics)
        return new_states, metrics

    return multi_update
