"""A fresh `TrainState` for a `LearningSpec`, made by one compiled program (op-by-op init
compiles every small op, one program each), compiled with the cheapest options the backend
takes, and optionally on a background thread while the caller reads its data."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline.learning.spec import LearningSpec, TrainState
from rljax_offline.learning.update import network_subset
from rljax_offline.runtime.background import Background

# Init runs once: XLA's cheapest backend optimisation compiles it 2-3x faster (the threefry
# and erf_inv of a few layers take seconds at the default level) while its run time stays in
# milliseconds. The values are the same draw up to float rounding (~1 ulp in a few percent
# of the weights, where the default level fuses differently), deterministic per backend.
_INIT_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0}
# On CPU, XLA's older elemental emitters compile the init program in about half the time of its
# fusion emitters (~0.3 instead of ~0.6 CPU-s for a [256, 256] MLP with Adam). Only where the
# installed XLA still has the option: without it, the options above alone.
_INIT_CPU_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False}


def _compile_init(lowered) -> Any:
    """The lowered init program, compiled with the cheapest options this backend takes."""
    if jax.default_backend() == "cpu":
        try:
            return lowered.compile(compiler_options={**_INIT_COMPILER_OPTIONS,
                                                     **_INIT_CPU_COMPILER_OPTIONS})
        except Exception as e:  # noqa: BLE001 - XLA reports an unknown option generically
            if "No such compile option" not in str(e):
                raise
    return lowered.compile(compiler_options=_INIT_COMPILER_OPTIONS)


def init_state(learning: LearningSpec, seed: int = 0, connector_state: Any = ()) -> TrainState:
    """A fresh `TrainState`: online networks, their target copies, one optimizer state per
    loss, the step counter and the algorithm's statistics, all made by one compiled program.

    Args:
      learning: the algorithm's `LearningSpec`.
      seed: seeds the networks' initial draw and the state's RNG.
      connector_state: the learner pipeline's state, kept in the `TrainState`.
    """
    return _traced_init(learning, seed, connector_state)()


def start_init_state(learning: LearningSpec, seed: int = 0,
                     connector_state: Any = ()) -> Background:
    """`init_state` whose program is traced now, on the caller's thread (so a mistake in the
    spec's `init` raises here), then lowered, compiled and run on a background thread:
    XLA's compile releases the GIL, so the caller reads its data meanwhile. `.result()` is
    the `TrainState` (or the lowering's, compile's or run's error).

    Args:
      learning: the algorithm's `LearningSpec`.
      seed: seeds the networks' initial draw and the state's RNG.
      connector_state: the learner pipeline's state, kept in the `TrainState`.
    """
    return Background(_traced_init(learning, seed, connector_state))


def _init_parts(learning: LearningSpec, seed) -> tuple:
    """`(params, opt_states, rng, step, extra)` of a fresh state (traced by `_traced_init`)."""
    init_key, rng = jax.random.split(jax.random.PRNGKey(seed))
    params = dict(learning.init(init_key))
    for target, online in learning.targets.items():
        params[target] = jax.tree_util.tree_map(jnp.copy, params[online])
    opt_states = {loss.name: loss.optimizer.init(network_subset(params, loss.networks))
                  for loss in learning.losses}
    extra = jax.tree_util.tree_map(jnp.asarray, dict(learning.extra_init))
    return params, opt_states, rng, jnp.zeros((), jnp.int32), extra


def state_template(learning: LearningSpec, connector_state: Any = ()) -> TrainState:
    """A `TrainState` of zeros with the structure, shapes and dtypes `init_state` makes,
    without compiling or running anything (`jax.eval_shape`): what loading a checkpoint's
    state needs to know.

    Args:
      learning: the algorithm's `LearningSpec`.
      connector_state: the learner connector state the template carries.
    """
    check_learning_spec(learning)
    shapes = jax.eval_shape(functools.partial(_init_parts, learning), np.int32(0))
    params, opt_states, rng, step, extra = jax.tree_util.tree_map(
        lambda s: np.zeros(s.shape, s.dtype), shapes)
    return TrainState(params=params, opt_states=opt_states, step=step, rng=rng,
                      connector_state=connector_state, extra=extra)


def _traced_init(learning: LearningSpec, seed: int,
                 connector_state: Any) -> Callable[[], TrainState]:
    """The init program, traced; calling the result lowers, compiles and runs it."""

    check_learning_spec(learning)
    seed = np.asarray(seed, np.int32)
    traced = jax.jit(functools.partial(_init_parts, learning)).trace(seed)

    def compile_and_run() -> TrainState:
        compiled = _compile_init(traced.lower())
        params, opt_states, rng, step, extra = compiled(seed)
        return TrainState(params=params, opt_states=opt_states, step=step, rng=rng,
                          connector_state=connector_state, extra=extra)

    return compile_and_run


def check_learning_spec(learning: LearningSpec) -> None:
    """Named errors for a spec the engine cannot step (checked before anything traces).

    Args:
      learning: the spec to check.
    """
    names = [loss.name for loss in learning.losses]
    if len(set(names)) != len(names):
        raise ValueError(f"loss names must be unique (one optimizer state each), got {names}")
    if any(not isinstance(loss.every, int) or loss.every < 1 for loss in learning.losses):
        raise ValueError("Loss.every must be an int >= 1")
    if not 0.0 < learning.tau <= 1.0:
        raise ValueError(f"tau must be in (0, 1], got {learning.tau}")
