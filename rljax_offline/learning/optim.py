"""The optimizer every built-in algorithm steps its losses with."""

from __future__ import annotations

import optax


def make_optimizer(lr: float, grad_clip: float | None = None) -> optax.GradientTransformation:
    """Adam, after global-norm gradient clipping when `grad_clip` is set (RLlib's
    `grad_clip` with `grad_clip_by="global_norm"`).

    Args:
      lr: the learning rate.
      grad_clip: the largest global gradient norm, or None for no clipping.
    """
    adam = optax.adam(lr)
    return optax.chain(optax.clip_by_global_norm(grad_clip), adam) if grad_clip else adam
