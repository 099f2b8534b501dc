"""The learner core: one generic update for every algorithm, written the pmap way.

An algorithm is a `Learner`: how to initialise its networks, and an ordered tuple of `Loss`es,
each a pure `(params, batch, rng) -> (per_example_loss [N], metrics)` with the networks it
optimizes and its optax optimizer (actor, critic, entropy or Lagrange multipliers: as many as
the algorithm has). The core does the rest, for all of them alike:

* gradients w.r.t. each loss's own networks, its optimizer step, in order (a later loss sees the
  params the earlier ones produced, as SAC-style learners do);
* honest reductions: a loss is `sum(per_example * loss_mask) / global_sum(loss_mask)`, the sum
  of the mask `psum`med over devices, so padded rows never count and N devices compute exactly
  the one-device update (up to float summation order) with no device-count scaling;
* Polyak target updates (`targets`, `tau`, `target_update_period`);
* per-example RNG keys sliced like the batch, so randomness does not depend on the sharding.

The per-device update runs in three ways that agree (tests check all three):
`jax.shard_map` with `check_vma=True` over a `("data",)` mesh (the default; JAX's AD then
sums the gradients of replicated params over the axis itself), `jax.pmap` (the gradients are
`psum`med explicitly), and plain `jit` with no axis for one device.

Example (a complete BC learner):
    >>> policy = make_policy(obs_spec, act_spec)
    >>> def nll(params, batch, rng):
    ...     inputs = policy.dist_inputs(params["policy"], batch)
    ...     return -policy.dist.logp(inputs, batch["actions"]), {}
    >>> learner = Learner(init=lambda rng: {"policy": policy.init(rng)},
    ...                   losses=(Loss("default_optimizer", ("policy",), nll, optax.adam(1e-3)),),
    ...                   act=lambda p, obs: policy.apply(p["policy"], obs), dist=policy.dist)
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "data"
MODES = ("shard_map", "pmap", "jit")


class TrainState(NamedTuple):
    """Everything an update reads and writes: a pytree, saved whole in checkpoints.

    `params` maps network names (`policy`, `value`, `q`, `target_q`, ...) to their params;
    `opt_states` maps each `Loss.name` to its optax state; `extra` holds algorithm statistics
    that change without gradients (MARWIL's moving average of squared advantages)."""

    params: dict
    opt_states: dict
    step: jax.Array
    rng: jax.Array
    connector_state: Any = ()
    extra: dict = {}  # noqa: RUF012 - NamedTuple defaults are never mutated here


class Loss(NamedTuple):
    """One optimized group: `fn(params, batch, rng) -> (per_example_loss [N], metrics)`.

    `params` is the full dict (targets included); gradients flow only into `networks`.
    `metrics` values are per-example `[N]` arrays (reduced like the loss) or device-invariant
    scalars. `rng` holds one key per example, `[N, 2]`. `every`: the optimizer steps only on
    updates whose count is a multiple of it (TD3's delayed policy updates); in between its
    networks and optimizer state are left exactly as they are."""

    name: str
    networks: tuple[str, ...]
    fn: Callable
    optimizer: optax.GradientTransformation
    every: int = 1


class Learner(NamedTuple):
    """An algorithm's learner, as pure functions (see the module docstring).

    Attributes:
      init: `rng -> params` of the online networks; targets are copied from them.
      losses: the optimized groups, applied in order.
      act: `(params, obs [N, ...]) -> action_dist_inputs [N, d]`, what acting runs.
      dist: the distribution of `act`'s output (`greedy`, `sample`, `logp`, `entropy`).
      targets: target name -> online name, updated `t <- tau * online + (1 - tau) * t` every
        `target_update_period` updates (tau 1: a hard copy).
      prepare: `(params, extra, batch, rng) -> (batch, extra)`, on the device before the
        losses: columns that need the current networks (MARWIL's advantages), statistics.
      extra_init: the initial `TrainState.extra`.
      columns: the learner-pipeline columns the losses read (kept when data is materialized).
      learner_connector: pieces the algorithm appends to the default learner pipeline.
      policy: the `models.policy.Policy` that `act` runs on `params["policy"]`, where the
        algorithm acts through one (acting needs it for recurrent policies' state).
    """

    init: Callable
    losses: tuple
    act: Callable
    dist: Any
    targets: dict = {}  # noqa: RUF012
    tau: float = 1.0
    target_update_period: int = 1
    prepare: Callable | None = None
    extra_init: dict = {}  # noqa: RUF012
    columns: tuple = ("obs", "actions")
    learner_connector: tuple = ()
    policy: Any = None


# ---------------------------------------------------------------------- reductions


class _Axis(NamedTuple):
    """How the update is being traced: the axis name (None under plain jit) and whether AD
    already sums the gradients of replicated inputs over it (shard_map with check_vma)."""

    name: str | None
    grads_summed: bool

    def psum(self, x):
        return x if self.name is None else lax.psum(x, self.name)

    def sum_grads(self, grads):
        return grads if self.name is None or self.grads_summed else lax.psum(grads, self.name)


_NO_AXIS = _Axis(None, False)
_CURRENT_AXIS: contextvars.ContextVar[_Axis] = contextvars.ContextVar(
    "rljax_offline_axis", default=_NO_AXIS)  # noqa: B039 - an immutable NamedTuple


@contextlib.contextmanager
def _tracing_with(axis: _Axis):
    token = _CURRENT_AXIS.set(axis)
    try:
        yield
    finally:
        _CURRENT_AXIS.reset(token)


def global_sum(x: jax.Array) -> jax.Array:
    """`sum(x)` over the global batch (all devices), inside a learner's losses or prepare."""
    return _CURRENT_AXIS.get().psum(jnp.sum(x))


def global_mean(x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """Masked mean of per-example `x [N]` over the global batch (0 where nothing counts)."""
    m = jnp.ones_like(x) if mask is None else mask.astype(x.dtype)
    return global_sum(x * m) / jnp.maximum(global_sum(m), 1.0)


def per_example_normal(keys: jax.Array, shape: tuple = ()) -> jax.Array:
    """Standard normals `[N, *shape]`, one draw per example key."""
    return jax.vmap(lambda k: jax.random.normal(k, shape))(keys)


def per_example_uniform(keys: jax.Array, shape: tuple = (), minval=0.0, maxval=1.0):
    """Uniforms in `[minval, maxval)`, `[N, *shape]`, one draw per example key."""
    return jax.vmap(lambda k: jax.random.uniform(k, shape, minval=minval, maxval=maxval))(keys)


# ---------------------------------------------------------------------- state and update


def init_state(learner: Learner, seed: int = 0, connector_state: Any = ()) -> TrainState:
    """A fresh `TrainState`: online networks, their target copies, one optimizer state per
    loss. Initialised in one compiled call (op-by-op init compiles every small op)."""

    @jax.jit
    def init(seed):
        init_key, rng = jax.random.split(jax.random.PRNGKey(seed))
        params = dict(learner.init(init_key))
        for target, online in learner.targets.items():
            params[target] = jax.tree_util.tree_map(jnp.copy, params[online])
        opt_states = {loss.name: loss.optimizer.init(_subset(params, loss.networks))
                      for loss in learner.losses}
        return params, opt_states, rng

    _check_learner(learner)
    params, opt_states, rng = init(seed)
    extra = jax.tree_util.tree_map(jnp.asarray, dict(learner.extra_init))
    return TrainState(params=params, opt_states=opt_states, step=jnp.zeros((), jnp.int32),
                      rng=rng, connector_state=connector_state, extra=extra)


def _check_learner(learner: Learner) -> None:
    names = [loss.name for loss in learner.losses]
    if len(set(names)) != len(names):
        raise ValueError(f"loss names must be unique (one optimizer state each), got {names}")
    if any(not isinstance(loss.every, int) or loss.every < 1 for loss in learner.losses):
        raise ValueError("Loss.every must be an int >= 1")
    if not 0.0 < learner.tau <= 1.0:
        raise ValueError(f"tau must be in (0, 1], got {learner.tau}")


def _subset(params: dict, names: tuple) -> dict:
    missing = [n for n in names if n not in params]
    if missing:
        raise KeyError(f"a loss optimizes networks {missing} that the learner's init does not "
                       f"create; it has {sorted(params)}")
    return {n: params[n] for n in names}


def _reduce_metrics(metrics: dict, mask: jax.Array, n: int) -> dict:
    out = {}
    for k, v in metrics.items():
        v = jnp.asarray(v)
        if v.shape == (n,):
            v = v if jnp.issubdtype(v.dtype, jnp.floating) else v.astype(jnp.float32)
            v = global_mean(v, mask)
        out[k] = v
    return out


def make_update(learner: Learner, *, axis_name: str | None = AXIS, grads_summed: bool = True):
    """The per-device update `(state, batch) -> (state, metrics)`.

    `batch` is this device's shard of the global batch (a dict of `[n, ...]` arrays with an
    optional `loss_mask`); `axis_name=None` is the single-device form for plain `jit`.
    `grads_summed` says whether AD already sums replicated-param gradients over the axis
    (`shard_map(check_vma=True)`); under `pmap` it is False and they are `psum`med here.
    """
    axis = _Axis(axis_name, grads_summed)

    def update(state: TrainState, batch: dict, example_keys: jax.Array | None = None):
        with _tracing_with(axis):
            n = jax.tree_util.tree_leaves(batch)[0].shape[0]
            rng, key = jax.random.split(state.rng)
            if example_keys is None:  # one device: every example's key from this step's key
                example_keys = jax.random.split(key, n)
            mask = batch.get("loss_mask")
            mask = jnp.ones(n, jnp.float32) if mask is None else mask.astype(jnp.float32)
            batch = {**batch, "loss_mask": mask}
            params, extra = state.params, state.extra
            if learner.prepare is not None:
                batch, extra = learner.prepare(params, extra, batch,
                                               jax.vmap(lambda k: jax.random.fold_in(k, 0))(
                                                   example_keys))
            weight = jnp.maximum(axis.psum(mask.sum()), 1.0)
            opt_states, metrics = dict(state.opt_states), {}
            for i, loss in enumerate(learner.losses):
                keys = jax.vmap(lambda k, i=i: jax.random.fold_in(k, i + 1))(example_keys)

                def objective(sub, loss=loss, keys=keys, params=params):
                    per_example, aux = loss.fn({**params, **sub}, batch, keys)
                    return jnp.sum(per_example * mask) / weight, aux

                sub = _subset(params, loss.networks)
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
                metrics.update(_reduce_metrics(aux, mask, n))
                metrics[f"gradients_{loss.name}_global_norm"] = optax.tree.norm(grads)
            step = state.step + 1
            if learner.targets:
                params = _update_targets(params, learner, step)
            metrics["num_module_steps_trained"] = axis.psum(mask.sum())
        return TrainState(params=params, opt_states=opt_states, step=step, rng=rng,
                          connector_state=state.connector_state, extra=extra), metrics

    return update


def _update_targets(params: dict, learner: Learner, step: jax.Array) -> dict:
    period, tau = learner.target_update_period, learner.tau
    due = (step % period) == 0 if period > 1 else True
    params = dict(params)
    for target, online in learner.targets.items():
        new = jax.tree_util.tree_map(lambda o, t: tau * o + (1.0 - tau) * t,
                                     params[online], params[target])
        params[target] = new if period == 1 else jax.tree_util.tree_map(
            lambda n, t: jnp.where(due, n, t), new, params[target])
    return params


# ---------------------------------------------------------------------- devices


def select_devices(num_devices: int | str = "all") -> list:
    devices = jax.local_devices()
    if num_devices == "all":
        return devices
    if not isinstance(num_devices, int) or not 0 < num_devices <= len(devices):
        raise ValueError(f"num_devices={num_devices!r}: {len(devices)} local devices exist")
    return devices[:num_devices]


class DataParallel:
    """Runs a learner's per-device update over local devices.

    Args:
      learner: the algorithm's `Learner`.
      devices: the local devices (one is fine).
      global_batch_size: rows of one update over all devices; must divide evenly.
      mode: "shard_map" (default: `jax.shard_map` with `check_vma=True` over a `("data",)`
        mesh), "pmap" (`jax.pmap`), or "jit" (plain jit, one device, no axis).
    """

    def __init__(self, learner: Learner, devices: list, global_batch_size: int,
                 mode: str = "shard_map"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        n = len(devices)
        if mode == "jit" and n != 1:
            raise ValueError(f"mode='jit' runs on one device, got {n}")
        if global_batch_size % n:
            raise ValueError(f"train_batch_size_per_learner={global_batch_size} does not "
                             f"divide over {n} devices; use a multiple of {n}")
        self.learner, self.devices, self.mode = learner, devices, mode
        self.batch_size, self.per_device = global_batch_size, global_batch_size // n
        self.mesh = Mesh(np.asarray(devices), (AXIS,))
        self.replicated = NamedSharding(self.mesh, P())
        self.sharded = NamedSharding(self.mesh, P(AXIS))
        self._update = make_update(learner, axis_name=None if mode == "jit" else AXIS,
                                   grads_summed=mode == "shard_map")

    # -------------------------------------------------------------- placement

    def put_replicated(self, tree):
        return jax.device_put(tree, self.replicated)

    def put_sharded(self, tree):
        return jax.device_put(tree, self.sharded)

    def check_batch(self, batch: dict) -> None:
        """A clear error when a host batch is not one global batch."""
        n = len(jax.tree_util.tree_leaves(batch)[0])
        if n != self.batch_size:
            raise ValueError(f"a batch has {n} rows; each update takes exactly "
                             f"train_batch_size_per_learner={self.batch_size} rows")

    # -------------------------------------------------------------- per-device programs

    def _my_rows(self, idx: jax.Array) -> jax.Array:
        """This device's slice of a global index vector (all of it with no axis)."""
        if self.mode == "jit":
            return idx
        return lax.dynamic_slice_in_dim(idx, lax.axis_index(AXIS) * self.per_device,
                                        self.per_device)

    def _step_with_keys(self, state: TrainState, batch: dict):
        """One update whose per-example keys come from the global batch's key vector, so
        every sharding gives each example the same key."""
        _, key = jax.random.split(state.rng)
        keys = self._my_rows(jax.random.split(key, self.batch_size))
        return self._update(state, batch, keys)

    def _sample_steps(self, num_updates: int):
        B = self.batch_size

        def per_device(state, data):
            n = jax.tree_util.tree_leaves(data)[0].shape[0]

            def body(state, _):
                rng, key = jax.random.split(state.rng)
                mine = self._my_rows(jax.random.randint(key, (B,), 0, n))
                batch = jax.tree_util.tree_map(lambda x: jnp.take(x, mine, axis=0), data)
                return self._step_with_keys(state._replace(rng=rng), batch)

            state, metrics = lax.scan(body, state, None, length=num_updates)
            return state, _last_and_mean(metrics)

        return per_device

    def _epoch_steps(self, num_epochs: int):
        B = self.batch_size

        def per_device(state, data):
            n = jax.tree_util.tree_leaves(data)[0].shape[0]
            if n < B:
                raise ValueError(f"{n} rows cannot fill one minibatch of {B}")
            num_minibatches = n // B

            def epoch(state, _):
                rng, key = jax.random.split(state.rng)
                order = jax.random.permutation(key, n)[:num_minibatches * B]

                def minibatch(state, idx):
                    batch = jax.tree_util.tree_map(
                        lambda x: jnp.take(x, self._my_rows(idx), axis=0), data)
                    return self._step_with_keys(state, batch)

                return lax.scan(minibatch, state._replace(rng=rng),
                                order.reshape(num_minibatches, B))

            state, metrics = lax.scan(epoch, state, None, length=num_epochs)
            metrics = jax.tree_util.tree_map(lambda x: x.reshape(-1, *x.shape[2:]), metrics)
            return state, _last_and_mean(metrics)

        return per_device

    def _compile(self, per_device, batch_spec):
        """`per_device(state, batch)` for this mode: replicated state in and out, the batch
        sharded (`batch_spec=P(AXIS)`) or replicated (`P()`)."""
        if self.mode == "jit":
            return jax.jit(per_device, donate_argnums=0)
        if self.mode == "shard_map":
            f = jax.shard_map(per_device, mesh=self.mesh, in_specs=(P(), batch_spec),
                              out_specs=(P(), P()), check_vma=True)
            return jax.jit(f, donate_argnums=0)
        pm = jax.pmap(per_device, axis_name=AXIS, devices=self.devices,
                      in_axes=(None, 0 if batch_spec == P(AXIS) else None), out_axes=None)
        n = len(self.devices)

        def run(state, batch):
            if batch_spec == P(AXIS):
                batch = jax.tree_util.tree_map(
                    lambda x: x.reshape(n, x.shape[0] // n, *x.shape[1:]), batch)
            return pm(state, batch)

        return run

    @functools.cached_property
    def step(self):
        """`(state, global_batch) -> (state, metrics)`: one update, the batch sharded."""
        return self._compile(self._step_with_keys, P(AXIS))

    def scan_on_device(self, num_updates: int):
        """`(state, data) -> (state, metrics)`: `num_updates` updates in one `lax.scan`, each
        on a global minibatch drawn uniformly with replacement from `data` (a dict of
        equal-length arrays, replicated on every device); every device draws the same
        indices and takes its own slice. Metrics: the last update's, plus `*_mean` over all."""
        return self._compile(self._sample_steps(num_updates), P())

    def epochs_on_device(self, num_epochs: int):
        """`(state, data) -> (state, metrics)`: on-policy epochs (PPO) in one program: each
        epoch a fresh permutation of `data`'s rows (replicated on every device) cut into
        `len(data) // batch_size` global minibatches, one update each (rows past the last
        full minibatch sit that epoch out). Metrics as `scan_on_device`."""
        if num_epochs < 1:
            raise ValueError(f"num_epochs must be >= 1, got {num_epochs}")
        return self._compile(self._epoch_steps(num_epochs), P())

    def stream_updates(self, state: TrainState, batches: Iterator[dict], num_updates: int):
        """`num_updates` updates on global batches from `batches` (placed with
        `prefetch_to_device(..., self.sharded)`, or host batches, placed here)."""
        if num_updates < 1:
            raise ValueError(f"num_updates must be >= 1, got {num_updates}")
        history = []
        for _ in range(num_updates):
            batch = next(batches)
            if not isinstance(jax.tree_util.tree_leaves(batch)[0], jax.Array):
                self.check_batch(batch)
                batch = self.put_sharded(batch)
            state, metrics = self.step(state, batch)
            history.append(metrics)
        stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *history)
        return state, _last_and_mean(stacked)


def _last_and_mean(metrics: dict) -> dict:
    """Per-update metrics `[U]` -> the last update's values, and `<name>_mean` over the U
    updates for the losses (what a learning curve wants)."""
    out = {k: v[-1] for k, v in metrics.items()}
    out.update({f"{k}_mean": v.mean() for k, v in metrics.items() if k.endswith("loss")})
    return out


def prefetch_to_device(batches: Iterable[dict], sharding, size: int = 2) -> Iterator:
    """Yields `batches` already placed with `sharding`, keeping `size` of them in flight.

    `jax.device_put` returns at once and copies in the background, and the update that uses
    the previous batch runs asynchronously too, so host batching, copy and compute overlap.
    """
    if size < 1:
        raise ValueError(f"prefetch size must be >= 1, got {size}")
    queue: collections.deque = collections.deque()
    for batch in batches:
        queue.append(jax.device_put(batch, sharding))
        if len(queue) > size:
            yield queue.popleft()
    while queue:
        yield queue.popleft()
