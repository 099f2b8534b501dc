"""Gymnasium spaces as small, immutable, hashable specs, and RLlib's space dicts.

Why: an `Episode` or `EpisodeBatch` carries its spaces as static pytree metadata so that
slicing, batching or `jax.jit` can never drop them, and jit caches on them. gymnasium spaces
are mutable and not hashable, so each space is converted once into a `SpaceSpec`.

`space_to_dict` / `space_from_dict` speak RLlib's `gym_space_to_dict` format (Box bounds as
`base64(zlib(.npy bytes))`); bounds are always loaded with `allow_pickle=False`, so a space
dict from an untrusted file can never run code.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import io
import zlib
from typing import Any, Union

import gymnasium as gym
import numpy as np

from rljax_offline.errors import SpaceError


@dataclasses.dataclass(frozen=True)
class BoxSpec:
    shape: tuple[int, ...]
    dtype: str
    low: tuple[float, ...]  # flattened, C order
    high: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class DiscreteSpec:
    n: int
    start: int = 0
    dtype: str = "int64"

    @property
    def shape(self) -> tuple[int, ...]:
        return ()


@dataclasses.dataclass(frozen=True)
class MultiDiscreteSpec:
    nvec: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: str = "int64"
    start: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class MultiBinarySpec:
    shape: tuple[int, ...]
    dtype: str = "int8"


@dataclasses.dataclass(frozen=True)
class TupleSpec:
    spaces: tuple[SpaceSpec, ...]


@dataclasses.dataclass(frozen=True)
class DictSpec:
    keys: tuple[str, ...]
    spaces: tuple[SpaceSpec, ...]

    def items(self):
        return zip(self.keys, self.spaces)


SpaceSpec = Union[BoxSpec, DiscreteSpec, MultiDiscreteSpec, MultiBinarySpec, TupleSpec, DictSpec]
_LEAF_SPECS = (BoxSpec, DiscreteSpec, MultiDiscreteSpec, MultiBinarySpec)


# --------------------------------------------------------------------------- gym <-> spec


def to_spec(space: gym.Space | SpaceSpec | None) -> SpaceSpec | None:
    """Converts a gymnasium space into its hashable spec (specs and None pass through)."""
    if space is None or isinstance(space, (*_LEAF_SPECS, TupleSpec, DictSpec)):
        return space
    if isinstance(space, gym.spaces.Box):
        return BoxSpec(
            shape=tuple(int(s) for s in space.shape),
            dtype=np.dtype(space.dtype).name,
            low=tuple(np.asarray(space.low, np.float64).ravel().tolist()),
            high=tuple(np.asarray(space.high, np.float64).ravel().tolist()),
        )
    if isinstance(space, gym.spaces.Discrete):
        return DiscreteSpec(n=int(space.n), start=int(space.start),
                            dtype=np.dtype(space.dtype).name)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return MultiDiscreteSpec(
            nvec=tuple(int(v) for v in np.asarray(space.nvec).ravel()),
            shape=tuple(int(s) for s in space.shape),
            dtype=np.dtype(space.dtype).name,
            start=tuple(int(v) for v in np.asarray(space.start).ravel()),
        )
    if isinstance(space, gym.spaces.MultiBinary):
        return MultiBinarySpec(shape=tuple(int(s) for s in space.shape),
                               dtype=np.dtype(space.dtype).name)
    if isinstance(space, gym.spaces.Tuple):
        return TupleSpec(spaces=tuple(to_spec(s) for s in space.spaces))
    if isinstance(space, gym.spaces.Dict):
        return DictSpec(keys=tuple(space.spaces.keys()),
                        spaces=tuple(to_spec(s) for s in space.spaces.values()))
    raise SpaceError(f"unsupported space {space!r}: expected Box, Discrete, MultiDiscrete, "
                     "MultiBinary, Tuple or Dict")


@functools.lru_cache(maxsize=256)
def to_space(spec: SpaceSpec) -> gym.Space:
    """Builds the gymnasium space of a spec (cached: specs are immutable)."""
    if isinstance(spec, BoxSpec):
        low = np.asarray(spec.low, np.float64).reshape(spec.shape).astype(spec.dtype)
        high = np.asarray(spec.high, np.float64).reshape(spec.shape).astype(spec.dtype)
        return gym.spaces.Box(low=low, high=high, shape=spec.shape, dtype=spec.dtype)
    if isinstance(spec, DiscreteSpec):
        return gym.spaces.Discrete(spec.n, start=spec.start)
    if isinstance(spec, MultiDiscreteSpec):
        nvec = np.asarray(spec.nvec).reshape(spec.shape)
        start = np.asarray(spec.start).reshape(spec.shape) if spec.start else None
        return gym.spaces.MultiDiscrete(nvec, dtype=spec.dtype, start=start)
    if isinstance(spec, MultiBinarySpec):
        n = spec.shape[0] if len(spec.shape) == 1 else list(spec.shape)
        return gym.spaces.MultiBinary(n)
    if isinstance(spec, TupleSpec):
        return gym.spaces.Tuple(tuple(to_space(s) for s in spec.spaces))
    if isinstance(spec, DictSpec):
        return gym.spaces.Dict({k: to_space(s) for k, s in spec.items()})
    raise SpaceError(f"not a space spec: {spec!r}")


# --------------------------------------------------------------------------- structure


def leaf_shapes(spec: SpaceSpec) -> Any:
    """Per-item `(shape, dtype)` pytree of data in this space (Dict -> dict, Tuple -> tuple)."""
    if isinstance(spec, TupleSpec):
        return tuple(leaf_shapes(s) for s in spec.spaces)
    if isinstance(spec, DictSpec):
        return {k: leaf_shapes(s) for k, s in spec.items()}
    return (tuple(spec.shape), np.dtype(spec.dtype))


def empty_data(spec: SpaceSpec, length: int = 0) -> Any:
    """Zero-filled data of `length` items in the structure, shapes and dtypes of `spec`."""
    if isinstance(spec, TupleSpec):
        return tuple(empty_data(s, length) for s in spec.spaces)
    if isinstance(spec, DictSpec):
        return {k: empty_data(s, length) for k, s in spec.items()}
    return np.zeros((length, *spec.shape), dtype=spec.dtype)


def flat_dim(spec: SpaceSpec, one_hot_discrete: bool = True) -> int:
    """Size of one item once flattened (Discrete one-hot encoded when asked)."""
    if isinstance(spec, TupleSpec):
        return sum(flat_dim(s, one_hot_discrete) for s in spec.spaces)
    if isinstance(spec, DictSpec):
        return sum(flat_dim(s, one_hot_discrete) for s in spec.spaces)
    if isinstance(spec, DiscreteSpec):
        return spec.n if one_hot_discrete else 1
    if isinstance(spec, MultiDiscreteSpec):
        return sum(spec.nvec) if one_hot_discrete else int(np.prod(spec.shape))
    return int(np.prod(spec.shape, dtype=np.int64))


def structure_of(spec: SpaceSpec) -> Any:
    """A pytree of `None`-free placeholders with the structure of data in `spec`."""
    if isinstance(spec, TupleSpec):
        return tuple(structure_of(s) for s in spec.spaces)
    if isinstance(spec, DictSpec):
        return {k: structure_of(s) for k, s in spec.items()}
    return 0


# --------------------------------------------------------------------------- RLlib space dicts


def _encode_ndarray(array: np.ndarray) -> str:
    buf = io.BytesIO()
    np.save(buf, np.asarray(array), allow_pickle=False)
    return base64.b64encode(zlib.compress(buf.getvalue())).decode("ascii")


#: Largest space a space dict may describe (elements of a Box or bounds array): a few bytes of
#: a crafted file must not make gymnasium allocate gigabytes of bounds.
MAX_SPACE_ELEMENTS = 1 << 20


def _check_shape(shape: Any, what: str) -> tuple[int, ...]:
    if (not isinstance(shape, (list, tuple)) or len(shape) > 32
            or not all(type(d) is int and d >= 0 for d in shape)):
        raise SpaceError(f"space dict field {what!r} must be a list of ints >= 0, got "
                         f"{str(shape)[:80]}")
    size = 1
    for d in shape:
        size *= d
    if size > MAX_SPACE_ELEMENTS:
        raise SpaceError(f"space dict field {what!r} describes {size} elements; refused "
                         f"(limit {MAX_SPACE_ELEMENTS})")
    return tuple(shape)


def _decode_ndarray(text: Any, what: str) -> np.ndarray:
    try:
        packed = base64.b64decode(text)
        inflater = zlib.decompressobj()
        # 8 bytes an element plus the .npy header: more is not a space's bounds.
        raw = inflater.decompress(packed, 8 * MAX_SPACE_ELEMENTS + 4096)
        if inflater.unconsumed_tail or not inflater.eof:
            raise ValueError("compressed bounds are truncated or inflate beyond the limit")
        array = np.load(io.BytesIO(raw), allow_pickle=False)
        _check_shape(list(array.shape), what)
        return array
    except Exception as e:  # noqa: BLE001 - any failure here means a corrupt or unsafe dict
        raise SpaceError(f"space dict field {what!r} is not base64(zlib(.npy)) of a numeric "
                         f"array (object arrays are refused): {e}") from e


def space_to_dict(space: gym.Space | SpaceSpec) -> dict:
    """RLlib's `gym_space_to_dict` layout for a space."""
    spec = to_spec(space)
    if isinstance(spec, BoxSpec):
        sp = to_space(spec)
        return {"space": "box", "low": _encode_ndarray(sp.low), "high": _encode_ndarray(sp.high),
                "shape": list(spec.shape), "dtype": np.dtype(spec.dtype).str}
    if isinstance(spec, DiscreteSpec):
        return {"space": "discrete", "n": spec.n, "start": spec.start}
    if isinstance(spec, MultiDiscreteSpec):
        return {"space": "multi-discrete",
                "nvec": _encode_ndarray(np.asarray(spec.nvec).reshape(spec.shape)),
                "dtype": np.dtype(spec.dtype).str}
    if isinstance(spec, MultiBinarySpec):
        n = spec.shape[0] if len(spec.shape) == 1 else list(spec.shape)
        return {"space": "multi-binary", "n": n}
    if isinstance(spec, TupleSpec):
        return {"space": "tuple", "spaces": [space_to_dict(s) for s in spec.spaces]}
    if isinstance(spec, DictSpec):
        return {"space": "dict", "spaces": {k: space_to_dict(s) for k, s in spec.items()}}
    raise SpaceError(f"not a space: {space!r}")


def space_from_dict(d: Any) -> gym.Space:
    """Inverse of `space_to_dict`; refuses unknown or malformed dicts with a `SpaceError`."""
    if not isinstance(d, dict) or "space" not in d:
        raise SpaceError(f"expected an RLlib space dict with a 'space' key, got {type(d).__name__}")
    kind = d["space"]
    try:
        if kind == "box":
            shape = _check_shape(d["shape"], "shape")
            low = _decode_ndarray(d["low"], "low")
            high = _decode_ndarray(d["high"], "high")
            return gym.spaces.Box(low=low, high=high, shape=shape, dtype=np.dtype(d["dtype"]))
        if kind == "discrete":
            return gym.spaces.Discrete(int(d["n"]), start=int(d.get("start", 0)))
        if kind == "multi-discrete":
            nvec = _decode_ndarray(d["nvec"], "nvec")
            return gym.spaces.MultiDiscrete(nvec, dtype=np.dtype(d.get("dtype", "<i8")))
        if kind == "multi-binary":
            n = d["n"]
            _check_shape(n if isinstance(n, (list, tuple)) else [n], "n")
            return gym.spaces.MultiBinary(n)
        if kind == "tuple":
            return gym.spaces.Tuple(tuple(space_from_dict(s) for s in d["spaces"]))
        if kind == "dict":
            return gym.spaces.Dict({k: space_from_dict(s) for k, s in d["spaces"].items()})
    except SpaceError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as e:
        raise SpaceError(f"malformed {kind!r} space dict {str(d)[:200]}: {e}") from e
    except RecursionError:
        raise SpaceError("space dict nested too deeply") from None
    raise SpaceError(f"unsupported space kind {kind!r} in space dict")
