"""The one generic update for every algorithm, written the pmap way.

`make_update(learning)` turns a `LearningSpec` into the per-device
`(state, batch) -> (state, metrics)` that `DataParallel` runs. For all algorithms alike:

* gradients w.r.t. each loss's own networks, its optimizer step, in order (a later loss sees
  the params the earlier ones produced, as SAC-style learners do);
* honest reductions: a loss is `sum(per_example * loss_mask) / axis.sum(loss_mask)`, the sum
  of the mask `psum`med over devices, so padded rows never count and N devices compute exactly
  the one-device update (up to float summation order) with no device-count scaling; for
  sequence rows (recurrent policies) the mask is `[B, T]` and the mean runs over timesteps;
* Polyak target updates (`targets`, `tau`, `target_update_period`);
* per-example RNG keys sliced like the batch, so randomness does not depend on the sharding.

The device axis is explicit: the update hands every loss and `prepare` a `BatchAxis`, the
one way they reduce over the global batch (`axis.sum(x)`, `axis.mean(x, mask)`).

The per-device update runs in three ways that agree (tests check all three):
`jax.shard_map` with `check_vma=True` over a `("data",)` mesh (the default; JAX's AD then
sums the gradients of replicated params over the axis itself), `jax.pmap` (the gradients are
`psum`med explicitly), and plain `jit` with no axis for one device.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

from rljax_offline.learning.spec import LearningSpec, TrainState

AXIS = "data"


class BatchAxis(NamedTuple):
    """The global batch's device axis, as losses and `prepare` receive it.

    Losses use `sum` / `mean`, which are exact over every device's rows whatever the
    sharding.

    Attributes:
      name: the mapped axis (None under plain jit, one device).
      grads_summed: whether JAX's AD already sums the gradients of replicated inputs over
        it (`shard_map` with `check_vma`), else the update `psum`s them.
    """

    name: str | None = None
    grads_summed: bool = False

    def psum(self, x):
        """`x` summed over the devices (itself with no axis)."""
        return x if self.name is None else lax.psum(x, self.name)

    def sum(self, x: jax.Array) -> jax.Array:
        """`sum(x)` over the global batch (all devices)."""
        return self.psum(jnp.sum(x))

    def mean(self, x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        """Masked mean of per-example `x [N]` over the global batch (0 where nothing
        counts)."""
        m = jnp.ones_like(x) if mask is None else mask.astype(x.dtype)
        return self.sum(x * m) / jnp.maximum(self.sum(m), 1.0)

    def max(self, x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        """The largest `x` of the global batch where `mask` is nonzero (the dtype's lowest
        value where nothing counts); no gradient (a constant such as a softmax's shift)."""
        x = jax.lax.stop_gradient(x)
        low = jnp.finfo(x.dtype).min
        m = jnp.max(x if mask is None else jnp.where(mask > 0, x, low), initial=low)
        return m if self.name is None else lax.pmax(m, self.name)

    def sum_grads(self, grads):
        """Gradients of replicated params summed over the devices, where AD did not."""
        return grads if self.name is None or self.grads_summed else lax.psum(grads, self.name)


def network_subset(params: dict, names: tuple) -> dict:
    """The params of some networks (a named error for one the spec does not make).

    Args:
      params: network name -> params (`TrainState.params`).
      names: the networks to take.
    """
    missing = [n for n in names if n not in params]
    if missing:
        raise KeyError(f"a loss optimizes networks {missing} that the spec's init does not "
                       f"create; it has {sorted(params)}")
    return {n: params[n] for n in names}


def _reduce_metrics(metrics: dict, mask: jax.Array, axis: BatchAxis) -> dict:
    out = {}
    for k, v in metrics.items():
        v = jnp.asarray(v)
        if v.shape in (mask.shape, (mask.size,)):
            v = v if jnp.issubdtype(v.dtype, jnp.floating) else v.astype(jnp.float32)
            v = axis.mean(v.reshape(mask.shape), mask)
        out[k] = v
    return out


def _per_step(loss_name: str, per_example: jax.Array, mask: jax.Array) -> jax.Array:
    """A loss's per-example values shaped like the mask: `[N]` for flat rows; for sequence
    rows (mask `[B, T]`) either `[B, T]` or the same steps flattened, `[B * T]`."""
    if per_example.size != mask.size:
        raise ValueError(f"loss {loss_name!r} returned per-example values of shape "
                         f"{per_example.shape}; the batch's loss_mask is {mask.shape} (one "
                         "value per timestep, flat or [B, T])")
    return per_example.reshape(mask.shape)


def _step_keys(keys: jax.Array, mask: jax.Array) -> jax.Array:
    """Per-row keys `[B, 2]` -> one key per timestep, `mask.shape + (2,)` (`[B, T, 2]` for
    sequence rows: the row's key folded with t)."""
    if mask.ndim == 1:
        return keys
    ts = jnp.arange(mask.shape[1])
    return jax.vmap(lambda k: jax.vmap(lambda t: jax.random.fold_in(k, t))(ts))(keys)


def make_update(learning: LearningSpec, *, axis_name: str | None = AXIS,
                grads_summed: bool = True):
    """The per-device update `(state, batch) -> (state, metrics)`.

    `batch` is this device's shard of the global batch (a dict of `[n, ...]` arrays with an
    optional `loss_mask`).

    Args:
      learning: the algorithm's `LearningSpec`.
      axis_name: the device axis; None is the single-device form for plain `jit`.
      grads_summed: whether AD already sums replicated-param gradients over the axis
        (`shard_map(check_vma=True)`); under `pmap` it is False and they are `psum`med here.
    """
    axis = BatchAxis(axis_name, grads_summed)

    def update(state: TrainState, batch: dict, example_keys: jax.Array | None = None):
        n = jax.tree_util.tree_leaves(batch)[0].shape[0]
        rng, key = jax.random.split(state.rng)
        if example_keys is None:  # one device: every example's key from this step's key
            example_keys = jax.random.split(key, n)
        mask = batch.get("loss_mask")
        mask = jnp.ones(n, jnp.float32) if mask is None else mask.astype(jnp.float32)
        batch = {**batch, "loss_mask": mask}
        example_keys = _step_keys(example_keys, mask)
        fold = jnp.vectorize(jax.random.fold_in, signature="(k),()->(k)")
        params, extra = state.params, state.extra
        if learning.prepare is not None:
            batch, extra = learning.prepare(params, extra, batch, fold(example_keys, 0), axis)
        weight = jnp.maximum(axis.psum(mask.sum()), 1.0)
        opt_states, metrics = dict(state.opt_states), {}
        for i, loss in enumerate(learning.losses):
            keys = fold(example_keys, i + 1)

            def objective(sub, loss=loss, keys=keys, params=params):
                per_example, aux = loss.fn({**params, **sub}, batch, keys, axis)
                return jnp.sum(_per_step(loss.name, per_example, mask) * mask) / weight, aux

            sub = network_subset(params, loss.networks)
            (_, aux), grads = jax.value_and_grad(objective, has_aux=True)(sub)
            grads = axis.sum_grads(grads)
            updates, opt_state = loss.optimizer.update(grads, opt_states[loss.name], sub)
            new_sub = optax.apply_updates(sub, updates)
            if loss.every > 1:
                due = (state.step + 1) % loss.every == 0
                keep = lambda new, old, due=due: jax.tree_util.tree_map(
                    lambda n, o: jnp.where(due, n, o), new, old)
                new_sub = keep(new_sub, sub)
                opt_state = keep(opt_state, opt_states[loss.name])
            opt_states[loss.name] = opt_state
            params = {**params, **new_sub}
            metrics.update(_reduce_metrics(aux, mask, axis))
            metrics[f"gradients_{loss.name}_global_norm"] = optax.tree.norm(grads)
        step = state.step + 1
        if learning.targets:
            params = update_targets(params, learning, step)
        metrics["num_module_steps_trained"] = axis.psum(mask.sum())
        return TrainState(params=params, opt_states=opt_states, step=step, rng=rng,
                          connector_state=state.connector_state, extra=extra), metrics

    return update


def update_targets(params: dict, learning: LearningSpec, step: jax.Array) -> dict:
    """Polyak targets: `t <- tau * online + (1 - tau) * t` on updates whose count is a
    multiple of `target_update_period` (left as they are on the others).

    Args:
      params: network name -> params, targets included.
      learning: the spec naming each target, its online network, `tau` and period.
      step: the update count.
    """
    period, tau = learning.target_update_period, learning.tau
    due = (step % period) == 0 if period > 1 else True
    params = dict(params)
    for target, online in learning.targets.items():
        new = jax.tree_util.tree_map(lambda o, t: tau * o + (1.0 - tau) * t,
                                     params[online], params[target])
        params[target] = new if period == 1 else jax.tree_util.tree_map(
            lambda n, t: jnp.where(due, n, t), new, params[target])
    return params
