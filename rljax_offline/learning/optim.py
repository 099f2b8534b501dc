"""The optimizer every built-in algorithm steps its losses with."""

from __future__ import annotations

import optax


def make_optimizer(lr: float, grad_clip: float | None = None,
                   lr_of: dict[str, float] | None = None) -> optax.GradientTransformation:
    """Adam, after global-norm gradient clipping when `grad_clip` is set (RLlib's
    `grad_clip` with `grad_clip_by="global_norm"`).

    Args:
      lr: the learning rate.
      grad_clip: the largest global gradient norm, or None for no clipping.
      lr_of: learning rates of some of the group's networks (by name) away from `lr`, each
        with its own Adam (d3rlpy steps CQL's multiplier apart from the Q networks); one
        group's loss is still computed once.
    """
    adam = optax.adam(lr)
    if lr_of:
        adam = optax.multi_transform(
            {"_": adam, **{name: optax.adam(rate) for name, rate in lr_of.items()}},
            lambda params: {name: name if name in lr_of else "_" for name in params})
    return optax.chain(optax.clip_by_global_norm(grad_clip), adam) if grad_clip else adam
