"""Small pytree helpers shared by episodes, batches and the data layer."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np


def stack_items(items: list, what: str) -> Any:
    """Stacks a list of (possibly nested) per-step items into one pytree of arrays.

    Raises a `ValueError` naming `what` and the first step whose structure or shape differs.
    """
    first = items[0]
    if isinstance(first, (np.ndarray, np.generic, float, int, bool)):
        # Fast path (flat items, the common case): one numpy call, checked on failure.
        try:
            out = np.stack(items) if isinstance(first, np.ndarray) else np.asarray(items)
        except (ValueError, TypeError):
            out = None
        if out is not None and out.dtype != object:
            return out
    treedef = jax.tree_util.tree_structure(first)
    leaves_per_item = []
    for i, item in enumerate(items):
        leaves, td = jax.tree_util.tree_flatten(item)
        if td != treedef:
            raise ValueError(f"{what}: item {i} has structure {td}, but item 0 has {treedef}")
        leaves_per_item.append(leaves)
    stacked = []
    for j in range(treedef.num_leaves):
        column = [np.asarray(leaves[j]) for leaves in leaves_per_item]
        shape = column[0].shape
        for i, arr in enumerate(column):
            if arr.shape != shape:
                raise ValueError(f"{what}: item {i} has shape {arr.shape}, but item 0 has "
                                 f"shape {shape} (ragged data cannot be stacked)")
        stacked.append(np.stack(column) if column[0].ndim else np.asarray(column))
    return jax.tree_util.tree_unflatten(treedef, stacked)


def leading_dim(tree: Any, what: str) -> int:
    """The common leading dimension of every leaf of `tree`; `ValueError` if they disagree."""
    leaves = jax.tree_util.tree_leaves(tree)
    if not leaves:
        raise ValueError(f"{what} has no array leaves")
    dims = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        if np.ndim(leaf) == 0:
            raise ValueError(f"{what}{jax.tree_util.keystr(path)} is a scalar; expected a "
                             "leading time axis")
        dims[jax.tree_util.keystr(path)] = np.shape(leaf)[0]
    if len(set(dims.values())) > 1:
        raise ValueError(f"{what} is ragged: leading dims per leaf {dims}")
    return next(iter(dims.values()))


def values_equal(a: Any, b: Any) -> bool:
    """Deep equality for nested dicts/lists/tuples/arrays (infos, custom data)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, (np.ndarray, np.generic)) or isinstance(b, (np.ndarray, np.generic)):
        try:
            return bool(np.array_equal(np.asarray(a), np.asarray(b)))
        except Exception:  # noqa: BLE001
            return False
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001
        return False


class HostData:
    """Host-only Python data carried as static pytree metadata (infos, custom data).

    It is not jit data: equality is by value and the hash is coarse (the type and length),
    which keeps jit caching correct while letting non-hashable dicts ride along.
    """

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HostData) and (
            self.value is other.value or values_equal(self.value, other.value))

    def __hash__(self) -> int:
        try:
            return hash((type(self.value).__name__, len(self.value)))
        except TypeError:
            return hash(type(self.value).__name__)

    def __repr__(self) -> str:
        return f"HostData({self.value!r})"


class FrozenPytree:
    """Base of our immutable pytrees: `_array_fields` are the children (jit data),
    `_static_fields` the hashable aux data, and `_host_fields` ride along outside the pytree
    (JAX transforms return them as None). Subclasses register with
    `jax.tree_util.register_pytree_with_keys_class`."""

    __slots__ = ()
    _array_fields: tuple = ()
    _static_fields: tuple = ()
    _host_fields: tuple = ()

    def _init_fields(self, values: dict) -> None:
        for k, v in values.items():
            object.__setattr__(self, k, v)

    def tree_flatten_with_keys(self):
        children = tuple((jax.tree_util.GetAttrKey(f), getattr(self, f))
                         for f in self._array_fields)
        return children, tuple(getattr(self, f) for f in self._static_fields)

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        obj._init_fields(dict(zip(cls._array_fields, children)))
        obj._init_fields(dict(zip(cls._static_fields, aux)))
        obj._init_fields(dict.fromkeys(cls._host_fields))
        return obj

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable: use replace({name}=...) "
                             "for a changed copy")

    def __delattr__(self, name):
        raise AttributeError(f"{type(self).__name__} is immutable")
