"""RLlib's layer-initializer keys of `model_config`, as flax initializers.

RLlib's default models take `fcnet_kernel_initializer` / `fcnet_bias_initializer` for the
hidden layers of `fcnet_hiddens` and `head_fcnet_kernel_initializer` /
`head_fcnet_bias_initializer` for the output layer, each with a `..._kwargs` dict. A value is
the name of one of torch's `nn.init` functions (with or without its trailing underscore; its
keyword arguments as torch names them), `"torch_default"` (what PyTorch's `nn.Linear` draws:
kernel and bias uniform in +-1/sqrt(fan_in), which RLlib and d3rlpy use when no initializer is
given), or a flax initializer `(key, shape, dtype) -> array`. None keeps ours: flax's
LeCun-normal kernels and zero biases, the output layer's kernel scaled as the network needs
(0.01 for policy heads).

Why it matters: the draw changes what an algorithm learns in a given number of updates, and
not always one way. TD3+BC on `pendulum-mixed` ends 220-250 higher from PyTorch's draw than
from flax's after 20,000 updates, in both libraries, while on expert Pendulum episodes with
64-64 networks flax's reaches the expert's level first (README, "Parity with d3rlpy at
convergence"). `TORCH_DEFAULT` is the model-config entry for PyTorch's draw everywhere (TD3+BC's
default: the draw its published settings were tuned with).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import linen as nn

# A layer's initializer given the layer's fan-in (PyTorch's defaults depend on it for biases).
LayerInit = Callable[[int], Callable]

KEYS = ("fcnet_kernel_initializer", "fcnet_bias_initializer",
        "head_fcnet_kernel_initializer", "head_fcnet_bias_initializer")
MODEL_CONFIG_DEFAULTS = {k: None for k in KEYS} | {f"{k}_kwargs": None for k in KEYS}
TORCH_DEFAULT = {k: "torch_default" for k in KEYS}  # PyTorch's nn.Linear draw everywhere


class LayerInits(NamedTuple):
    """The initializers of one MLP: hidden layers' and the output layer's (None: ours).

    Attributes:
      hidden_kernel: the hidden layers' kernel initializer.
      hidden_bias: the hidden layers' bias initializer.
      head_kernel: the output layer's kernel initializer.
      head_bias: the output layer's bias initializer.
    """

    hidden_kernel: LayerInit | None = None
    hidden_bias: LayerInit | None = None
    head_kernel: LayerInit | None = None
    head_bias: LayerInit | None = None

    def hidden(self, fan_in: int) -> dict:
        """`nn.Dense` keyword arguments of a hidden layer of `fan_in` inputs."""
        return _dense_kwargs(self.hidden_kernel, self.hidden_bias, fan_in)

    def head(self, fan_in: int, kernel_init: Callable) -> dict:
        """`nn.Dense` keyword arguments of the output layer; `kernel_init` is ours (the
        network's own scale) where no head kernel initializer is given."""
        return {"kernel_init": kernel_init,
                **_dense_kwargs(self.head_kernel, self.head_bias, fan_in)}


def _uniform(low: float, high: float) -> Callable:
    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, low, high)
    return init


def _torch_default(fan_in: int) -> Callable:
    bound = 1.0 / math.sqrt(fan_in)
    return _uniform(-bound, bound)


def _gain(nonlinearity: str = "leaky_relu", a: float = 0.0) -> float:
    """torch's `calculate_gain` for the nonlinearities its kaiming initializers take."""
    gains = {"linear": 1.0, "sigmoid": 1.0, "tanh": 5.0 / 3, "relu": math.sqrt(2.0),
             "leaky_relu": math.sqrt(2.0 / (1 + a * a)), "selu": 0.75}
    if nonlinearity not in gains:
        raise ValueError(f"nonlinearity must be one of {sorted(gains)}, got {nonlinearity!r}")
    return gains[nonlinearity]


def _kernel_fans(fan_in: int, shape) -> tuple[int, int]:
    return fan_in, int(shape[-1])


def _named(name: str, kwargs: dict, kernel: bool) -> LayerInit:
    """torch's `nn.init.<name>` (kwargs as torch names them) as a `LayerInit`."""
    name = name.rstrip("_")
    if name == "torch_default":
        return _torch_default
    if name in ("zeros", "ones"):
        value = 0.0 if name == "zeros" else 1.0
        return lambda fan_in: nn.initializers.constant(value)
    if name == "constant":
        if "val" not in kwargs:
            raise ValueError("the 'constant' initializer needs kwargs {'val': ...}")
        value = float(kwargs.pop("val"))
        return lambda fan_in: nn.initializers.constant(value)
    if name == "normal":
        mean, std = kwargs.pop("mean", 0.0), kwargs.pop("std", 1.0)
        return lambda fan_in: (lambda key, shape, dtype=jnp.float32:
                               mean + std * jax.random.normal(key, shape, dtype))
    if name == "uniform":
        low, high = kwargs.pop("a", 0.0), kwargs.pop("b", 1.0)
        return lambda fan_in: _uniform(low, high)
    if name == "trunc_normal":
        mean, std = kwargs.pop("mean", 0.0), kwargs.pop("std", 1.0)
        low, high = kwargs.pop("a", -2.0), kwargs.pop("b", 2.0)
        return lambda fan_in: (lambda key, shape, dtype=jnp.float32: mean + std *
                               jax.random.truncated_normal(key, (low - mean) / std,
                                                           (high - mean) / std, shape, dtype))
    if not kernel:
        raise ValueError(f"{name!r} needs a matrix (torch computes its fans from one); a bias "
                         "takes zeros, ones, constant, normal, uniform, trunc_normal or "
                         "torch_default")
    if name in ("xavier_uniform", "xavier_normal"):
        gain = kwargs.pop("gain", 1.0)

        def xavier(fan_in):
            def init(key, shape, dtype=jnp.float32):
                fi, fo = _kernel_fans(fan_in, shape)
                std = gain * math.sqrt(2.0 / (fi + fo))
                if name == "xavier_normal":
                    return std * jax.random.normal(key, shape, dtype)
                return _uniform(-math.sqrt(3.0) * std, math.sqrt(3.0) * std)(key, shape, dtype)
            return init
        return xavier
    if name in ("kaiming_uniform", "kaiming_normal"):
        a, mode = kwargs.pop("a", 0.0), kwargs.pop("mode", "fan_in")
        gain = _gain(kwargs.pop("nonlinearity", "leaky_relu"), a)

        def kaiming(fan_in):
            def init(key, shape, dtype=jnp.float32):
                fi, fo = _kernel_fans(fan_in, shape)
                std = gain / math.sqrt(fi if mode == "fan_in" else fo)
                if name == "kaiming_normal":
                    return std * jax.random.normal(key, shape, dtype)
                return _uniform(-math.sqrt(3.0) * std, math.sqrt(3.0) * std)(key, shape, dtype)
            return init
        return kaiming
    if name == "orthogonal":
        gain = kwargs.pop("gain", 1.0)
        return lambda fan_in: nn.initializers.orthogonal(gain)
    raise ValueError(f"unknown initializer {name!r}: torch's nn.init names (xavier_uniform_, "
                     "xavier_normal_, kaiming_uniform_, kaiming_normal_, orthogonal_, normal_, "
                     "uniform_, trunc_normal_, zeros_, ones_, constant_), 'torch_default' or "
                     "a flax initializer")


def layer_init(value, kwargs: dict | None, key: str) -> LayerInit | None:
    """One model-config initializer (`value` and its `kwargs`) as a `LayerInit`."""
    if value is None:
        if kwargs:
            raise ValueError(f"model_config: {key}_kwargs given without {key}")
        return None
    kernel = "kernel" in key
    if callable(value):
        if kwargs:
            raise ValueError(f"model_config: {key}_kwargs applies to a named initializer, "
                             "not a function")
        return lambda fan_in: value
    if not isinstance(value, str):
        raise ValueError(f"model_config: {key} must be a name, a flax initializer or None, "
                         f"got {value!r}")
    rest = dict(kwargs or {})
    try:
        made = _named(value, rest, kernel)
    except ValueError as e:
        raise ValueError(f"model_config: {key}: {e}") from None
    if rest:
        raise ValueError(f"model_config: {key}_kwargs has keys {sorted(rest)} that "
                         f"{value!r} does not take")
    return made


def layer_inits(model_config: dict) -> LayerInits:
    """The MLP initializers a completed model config asks for.

    Args:
      model_config: a model config completed with `MODEL_CONFIG_DEFAULTS`.
    """
    return LayerInits(*(layer_init(model_config.get(k), model_config.get(f"{k}_kwargs"), k)
                        for k in KEYS))


def _dense_kwargs(kernel: LayerInit | None, bias: LayerInit | None, fan_in: int) -> dict:
    """`nn.Dense` keyword arguments for a layer of `fan_in` inputs (none where ours stays)."""
    out = {}
    if kernel is not None:
        out["kernel_init"] = kernel(fan_in)
    if bias is not None:
        out["bias_init"] = bias(fan_in)
    return out
