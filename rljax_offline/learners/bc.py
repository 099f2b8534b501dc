"""Behavior cloning, data-parallel the pmap way.

`make_update` returns ONE pure per-device function: it sees its shard of the batch and averages
gradients with `lax.pmean(grads, axis_name="data")`. `DataParallel` runs it through
`jax.shard_map` over a 1-D `("data",)` mesh of local devices (how JAX implements `pmap` since
0.8), with `check_vma=False`: with the default `True`, the gradient w.r.t. replicated params comes
back already summed over the axis and `pmean` would over-count by the device count. The same
function under `jax.pmap` gives the same params, and one device is the n=1 case.

Small data sets live on the device: an iteration is one jitted `lax.scan` of updates, each
drawing its global minibatch with the same key on every device and taking its own slice, so N
devices compute exactly the 1-device update (up to float summation order). Data bigger than the
device budget streams instead: host batches go through `prefetch_to_device` (a few batches in
flight, copied while the previous update runs) into `DataParallel.stream_updates`.

Metrics use RLlib's learner names: `policy_loss`, `entropy`,
`gradients_default_optimizer_global_norm`, `num_module_steps_trained`; plus `policy_loss_mean`
(the mean over the updates of one call).
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from rljax_offline.models.policy import Policy

AXIS = "data"


class TrainState(NamedTuple):
    params: Any
    opt_state: Any
    step: jax.Array
    rng: jax.Array
    connector_state: Any = ()


def init_state(policy: Policy, optimizer: optax.GradientTransformation, seed: int = 0,
               connector_state: Any = ()) -> TrainState:
    @jax.jit
    def init(seed):
        # One compiled call: initialising op by op compiles every small op separately.
        init_key, rng = jax.random.split(jax.random.PRNGKey(seed))
        params = policy.init(init_key)
        return params, optimizer.init(params), rng

    params, opt_state, rng = init(seed)
    return TrainState(params=params, opt_state=opt_state, step=jnp.zeros((), jnp.int32),
                      rng=rng, connector_state=connector_state)


def make_optimizer(lr: float, grad_clip: float | None = None) -> optax.GradientTransformation:
    adam = optax.adam(lr)
    return optax.chain(optax.clip_by_global_norm(grad_clip), adam) if grad_clip else adam


def make_update(policy: Policy, optimizer: optax.GradientTransformation,
                axis_name: str = AXIS):
    """The per-device BC update `(state, batch) -> (state, metrics)`.

    `batch` holds this device's shard: `obs`, `actions` and optionally `loss_mask`. The loss is
    the masked mean negative log-likelihood over the *global* batch: each device divides its
    masked sum by the global count (a `psum`), scaled by the device count so that `pmean`
    of the gradients is the gradient of the global mean.
    """

    def loss_fn(params, batch):
        inputs = policy.apply(params, batch["obs"])
        nll = -policy.dist.logp(inputs, batch["actions"])
        mask = batch.get("loss_mask")
        mask = jnp.ones_like(nll) if mask is None else mask.astype(nll.dtype)
        n_dev = lax.psum(1, axis_name)
        count = jnp.maximum(lax.psum(mask.sum(), axis_name), 1.0)
        loss = jnp.sum(nll * mask) / count * n_dev
        entropy = jnp.sum(policy.dist.entropy(inputs) * mask) / count * n_dev
        return loss, (entropy, mask.sum())

    def update(state: TrainState, batch: dict) -> tuple[TrainState, dict]:
        (loss, (entropy, count)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params, batch)
        grads = lax.pmean(grads, axis_name)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        metrics = {"policy_loss": lax.pmean(loss, axis_name),
                   "entropy": lax.pmean(entropy, axis_name),
                   "gradients_default_optimizer_global_norm": optax.tree.norm(grads),
                   "num_module_steps_trained": lax.psum(count, axis_name)}
        return state._replace(params=params, opt_state=opt_state, step=state.step + 1), metrics

    return update


def select_devices(num_devices: int | str = "all") -> list:
    devices = jax.local_devices()
    if num_devices == "all":
        return devices
    if not isinstance(num_devices, int) or not 0 < num_devices <= len(devices):
        raise ValueError(f"num_devices={num_devices!r}: {len(devices)} local devices exist")
    return devices[:num_devices]


class DataParallel:
    """Runs a per-device update over a `("data",)` mesh with `shard_map`.

    Args:
      update: the per-device function from `make_update`.
      devices: the local devices to use (one is fine).
      global_batch_size: the batch of one update over all devices; must divide evenly.
    """

    def __init__(self, update, devices: list, global_batch_size: int):
        n = len(devices)
        if global_batch_size % n:
            raise ValueError(f"train_batch_size_per_learner={global_batch_size} does not "
                             f"divide over {n} devices; use a multiple of {n}")
        self.update, self.devices = update, devices
        self.batch_size, self.per_device = global_batch_size, global_batch_size // n
        self.mesh = Mesh(np.asarray(devices), (AXIS,))
        self.replicated = NamedSharding(self.mesh, P())
        self.sharded = NamedSharding(self.mesh, P(AXIS))

    def shard_map(self, f, in_specs, out_specs):
        return jax.shard_map(f, mesh=self.mesh, in_specs=in_specs, out_specs=out_specs,
                             check_vma=False)

    def put_replicated(self, tree):
        return jax.device_put(tree, self.replicated)

    def put_sharded(self, tree):
        return jax.device_put(tree, self.sharded)

    def check_batch(self, batch: dict) -> None:
        """A clear error when a host batch is not one global batch."""
        n = len(jax.tree_util.tree_leaves(batch)[0])
        if n != self.batch_size:
            raise ValueError(f"a streamed batch has {n} rows; each update takes exactly "
                             f"train_batch_size_per_learner={self.batch_size} rows")

    @functools.cached_property
    def step(self):
        """One update on a host batch `[global_batch, ...]` sharded over the devices."""
        return jax.jit(self.shard_map(self.update, (P(), P(AXIS)), (P(), P())),
                       donate_argnums=0)

    def stream_updates(self, state: TrainState, batches: Iterator[dict], num_updates: int
                       ) -> tuple[TrainState, dict]:
        """`num_updates` updates on batches from `batches` (device batches from
        `prefetch_to_device(..., self.sharded)`, or host batches, sharded here)."""
        if num_updates < 1:
            raise ValueError(f"num_updates must be >= 1, got {num_updates}")
        losses, metrics = [], None
        for _ in range(num_updates):
            batch = next(batches)
            if not isinstance(jax.tree_util.tree_leaves(batch)[0], jax.Array):
                self.check_batch(batch)
                batch = self.put_sharded(batch)
            state, metrics = self.step(state, batch)
            losses.append(metrics["policy_loss"])
        return state, {**metrics, "policy_loss_mean": jnp.mean(jnp.stack(losses))}

    def scan_on_device(self, num_updates: int):
        """`(state, data) -> (state, metrics)`: `num_updates` updates on minibatches sampled
        from `data` (a dict of equal-length arrays, replicated on every device)."""
        B, b = self.batch_size, self.per_device

        def per_device(state, data):
            n = jax.tree_util.tree_leaves(data)[0].shape[0]
            start = lax.axis_index(AXIS) * b

            def body(state, _):
                rng, key = jax.random.split(state.rng)
                idx = jax.random.randint(key, (B,), 0, n)
                mine = lax.dynamic_slice_in_dim(idx, start, b)
                batch = jax.tree_util.tree_map(lambda x: jnp.take(x, mine, axis=0), data)
                return self.update(state._replace(rng=rng), batch)

            state, metrics = lax.scan(body, state, None, length=num_updates)
            return state, jax.tree_util.tree_map(lambda m: m[-1], metrics) | {
                "policy_loss_mean": metrics["policy_loss"].mean()}

        return jax.jit(self.shard_map(per_device, (P(), P()), (P(), P())),
                       donate_argnums=0)


def prefetch_to_device(batches: Iterable[dict], sharding, size: int = 2) -> Iterator:
    """Yields `batches` already placed with `sharding`, keeping `size` of them in flight.

    `jax.device_put` returns at once and copies in the background, and the update that uses
    the previous batch runs asynchronously too, so host batching, copy and compute overlap.
    """
    if size < 1:
        raise ValueError(f"prefetch size must be >= 1, got {size}")
    queue: collections.deque = collections.deque()
    it = iter(batches)
    for batch in it:
        queue.append(jax.device_put(batch, sharding))
        if len(queue) > size:
            yield queue.popleft()
    while queue:
        yield queue.popleft()
