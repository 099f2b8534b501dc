"""RLlib's default CNN encoder for image observations (`conv_filters`, `conv_activation`).

`conv_filters` is a list of `[out_channels, [kernel_h, kernel_w], stride]`; by default the one
RLlib's `get_filter_config` picks for the image size (Atari 84x84, 64x64, 42x42, 96x96,
10x10). Every layer but the last pads "same"; the last pads "valid", so the 84x84 filters end
in a 1x1x256 feature map as in RLlib's vision network; the map is flattened.

uint8 frames stay uint8 until they reach the device and are scaled here to `x / 128 - 1`
(RLlib's normalized Atari frames), so host memory and transfers carry a quarter of the bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from rljax_offline.models.encoders import ACTIVATIONS

DEFAULT_FILTERS = {
    (96, 96): ((16, (8, 8), 4), (32, (4, 4), 2), (256, (11, 11), 2)),
    (84, 84): ((16, (8, 8), 4), (32, (4, 4), 2), (256, (11, 11), 1)),
    (64, 64): ((32, (4, 4), 2), (64, (4, 4), 2), (128, (4, 4), 2), (256, (4, 4), 2)),
    (42, 42): ((16, (4, 4), 2), (32, (4, 4), 2), (256, (11, 11), 1)),
    (10, 10): ((16, (5, 5), 2), (32, (5, 5), 2)),
}


def is_image(shape: Sequence[int]) -> bool:
    """RLlib's rule: a Box of rank 3 (height, width, channels) goes through a CNN."""
    return len(shape) == 3


def default_conv_filters(shape: Sequence[int]) -> tuple:
    """RLlib's default filters for an `(h, w, c)` image; a named error for other sizes."""
    try:
        return DEFAULT_FILTERS[tuple(int(s) for s in shape[:2])]
    except KeyError:
        raise ValueError(
            f"no default conv_filters for images of shape {tuple(shape)}; defaults exist for "
            f"{sorted(DEFAULT_FILTERS)} (h, w): pass model_config conv_filters="
            "[[out_channels, [kh, kw], stride], ...]") from None


def check_conv_filters(filters) -> tuple:
    """`conv_filters` as a tuple of `(channels, (kh, kw), stride)`; a named error otherwise."""
    out = []
    for i, f in enumerate(filters):
        try:
            ch, kernel, stride = f
            kernel = (int(kernel), int(kernel)) if isinstance(kernel, int) else tuple(
                int(k) for k in kernel)
            if len(kernel) != 2:
                raise ValueError
            out.append((int(ch), kernel, int(stride)))
        except (TypeError, ValueError):
            raise ValueError(f"conv_filters[{i}] = {f!r}: expected [out_channels, [kh, kw], "
                             "stride]") from None
    if not out:
        raise ValueError("conv_filters is empty")
    return tuple(out)


def scale_frames(x: jax.Array) -> jax.Array:
    """uint8 frames to float32 in [-1, 1); float inputs unchanged (already scaled)."""
    if x.dtype == jnp.uint8:
        return x.astype(jnp.float32) / 128.0 - 1.0
    return x.astype(jnp.float32)


class WholeMapConv(nn.Module):
    """A "valid" convolution whose kernel covers its whole input map (RLlib's last 11x11 layer
    on the 11x11 maps of 84x84 and 42x42 frames), computed as the one matrix product it is,
    because XLA's CPU convolution is far slower for that shape, forward and backward (figures
    on the benchmarks page, "Figures behind design choices"). Same parameters (names,
    shapes, initial draws) and the same `[N, 1, 1, features]` output as `nn.Conv`.

    Attributes:
      features: the output channels.
    """

    features: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param("kernel", nn.initializers.lecun_normal(),
                            (*x.shape[1:], self.features))
        bias = self.param("bias", nn.initializers.zeros_init(), (self.features,))
        y = x.reshape(x.shape[0], -1) @ kernel.reshape(-1, self.features) + bias
        return y.reshape(x.shape[0], 1, 1, self.features)


class CNNEncoder(nn.Module):
    """`[N, h, w, c]` images -> `[N, features]` (conv stack, then flattened)."""

    filters: tuple
    activation: str = "relu"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        x = scale_frames(x)
        for i, (ch, kernel, stride) in enumerate(self.filters):
            last = i == len(self.filters) - 1
            if last and tuple(kernel) == tuple(x.shape[1:3]):
                conv = WholeMapConv(ch, name=f"Conv_{i}")
            else:
                conv = nn.Conv(ch, kernel, strides=stride, padding="VALID" if last else "SAME")
            x = act(conv(x))
        return x.reshape(x.shape[0], -1)
