"""The target policy OPE evaluates, behind one small protocol, from whatever the user has.

`TargetPolicy` answers, on batches of (post-connector) observations, on the host:
* `logp(obs, actions) -> [N]`: log-probability (Discrete) or log-density in the env's action
  units (Box) of the recorded actions: the numerator of the importance weights;
* `probs(obs) -> [N, n]` (Discrete): every action's probability, for FQE's exact expectation;
* `samples(obs, m, seed) -> [N, m, ...]` (Box): m actions drawn from it, for FQE's expectation,
  clipped to the space's bounds as the env clips what it executes (an unsquashed Gaussian's
  draws outside the bounds would ask the Q network about actions no data holds: FQE
  diverges on them).

`deterministic` targets (greedy acting, TD3+BC's actor) have indicator probabilities (1 on
the greedy action, `logp` 0 there and -inf elsewhere) for Discrete actions; a deterministic Box
target has no density, so the importance-weighted estimators cannot use it (FQE can).

Made from an algorithm's acting spec and params (`from_acting`; a policy that draws when it
acts, `ActingSpec.takes_key`, gets keys from the evaluation's seed: its target is the policy
of those draws), or from a plain function
(`from_function`), whose protocol is:
* Discrete actions: `fn(obs [N, ...]) -> probabilities [N, n]` (rows sum to 1; one-hot rows
  for a deterministic policy);
* Box actions: `fn(obs [N, ...]) -> (mean [N, ...], std [N, ...])` of a diagonal Gaussian in
  the env's action units (std all 0: a deterministic policy).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp

_CHUNK = 8192


def _chunked(fn: Callable, *arrays) -> np.ndarray:
    """`fn` over rows in chunks (bounded device memory), concatenated on the host."""
    n = int(np.shape(jax.tree_util.tree_leaves(arrays[0])[0])[0])
    outs = [np.asarray(fn(*jax.tree_util.tree_map(lambda x, i=i: x[i:i + _CHUNK], arrays)))
            for i in range(0, max(n, 1), _CHUNK)]
    return np.concatenate(outs) if outs else np.zeros((0,))


class TargetPolicy(NamedTuple):
    """The target policy (see the module docstring); made by `from_acting` or
    `from_function`.

    Attributes:
      act_spec: its action space's spec.
      deterministic: it always picks one action (greedy acting, a deterministic actor).
      logp: `logp(obs, actions) -> [N]`, the log-probability (or log-density in the env's
        units) of the recorded actions.
      probs: `probs(obs) -> [N, n]` every action's probability (Discrete actions; else None).
      samples: `samples(obs, m, seed) -> [N, m, ...]` actions drawn and clipped to the
        bounds (Box actions; else None).
    """

    act_spec: Any
    deterministic: bool
    logp: Callable
    probs: Callable | None = None
    samples: Callable | None = None

    @property
    def discrete(self) -> bool:
        return isinstance(self.act_spec, sp.DiscreteSpec)


def _unit_box_log_scale(act_spec) -> float:
    """`sum log(half-width)`: a density on [-1, 1]^d minus this is the density in the env's
    units (a squashed Gaussian's `logp` is in the unit box)."""
    low = np.asarray(act_spec.low, np.float64).reshape(-1)
    high = np.asarray(act_spec.high, np.float64).reshape(-1)
    return float(np.sum(np.log((high - low) / 2.0)))


def from_acting(act: Callable, dist, params: Any, act_spec, explore: bool = True, *,
                takes_key: bool = False, seed: int = 0) -> TargetPolicy:
    """The policy an algorithm acts with: `act(params, obs) -> action_dist_inputs` (with
    `takes_key`, `act(params, key, obs)`, given `PRNGKey(seed)`) and its distribution;
    `explore=False` evaluates its greedy actions (deterministic).

    The compiled functions take `params` as an argument and are shared by every target of
    the same `act` and `dist` (`_acting_programs`), so evaluating a run's next checkpoint
    reuses them instead of compiling its params in as constants again.

    Args:
      act: the acting function, `act(params, obs)` or `act(params, key, obs)`.
      dist: its action distribution (`models.distributions`).
      params: the acting params.
      act_spec: the action space's spec.
      explore: the distribution (True) or its greedy actions (False, deterministic).
      takes_key: `act` takes a PRNG key (a policy that draws when it acts).
      seed: the seed of that key and of the target's draws.

    Returns:
      The `TargetPolicy`.
    """
    act_spec = sp.to_spec(act_spec)
    deterministic = (not explore) or dist.kind == "deterministic"
    act_key = jax.random.PRNGKey(seed)
    if isinstance(act_spec, sp.DiscreteSpec):
        start, n = int(getattr(act_spec, "start", 0)), act_spec.n
        probs_j = _acting_programs(act, dist, deterministic, (start, n), takes_key)["probs"]

        def probs(obs):
            return _chunked(functools.partial(probs_j, params, act_key), obs
                            ).astype(np.float64)

        def logp(obs, actions):
            return _logp_of_actions(probs(obs), actions, start)

        return TargetPolicy(act_spec, deterministic, logp, probs=probs)

    scale = (_unit_box_log_scale(act_spec)
             if dist.kind in ("squashed_gaussian", "tanh_mean_gaussian") else 0.0)
    programs = _acting_programs(act, dist, deterministic, None, takes_key)
    greedy = functools.partial(programs["greedy"], params, act_key)

    def logp_box(obs, actions):
        if deterministic:
            return _point_mass_logp(_chunked(greedy, obs), actions)
        logp = _chunked(functools.partial(programs["logp"], params, act_key), obs,
                        jnp.asarray(actions, jnp.float32))
        return logp.astype(np.float64) - scale

    def samples(obs, m, seed=0):
        if deterministic:
            return np.repeat(_chunked(greedy, obs)[:, None], m, axis=1)
        key = jax.random.PRNGKey(seed)
        n = int(np.shape(jax.tree_util.tree_leaves(obs)[0])[0])
        outs = [np.asarray(programs["draw"](
                    params, act_key, jax.tree_util.tree_map(lambda x, i=i: x[i:i + _CHUNK],
                                                            obs),
                    jax.random.fold_in(key, i), m=m))
                for i in range(0, max(n, 1), _CHUNK)]
        return clip_to(act_spec, np.concatenate(outs))

    return TargetPolicy(act_spec, deterministic, logp_box, samples=samples)


@functools.lru_cache(maxsize=32)
def _acting_programs(act: Callable, dist, deterministic: bool,
                     discrete: tuple[int, int] | None,
                     takes_key: bool = False) -> dict[str, Callable]:
    """The jitted `(params, key, obs, ...)` functions of one acting policy (`key` reaches
    `act` where it `takes_key`): Discrete (`discrete=(start, n)`) `probs`; Box `logp` (of the
    distribution's own density), `greedy` and `draw` (m samples a row, compiled once per m)."""

    def inputs_of(params, key, obs):
        return act(params, key, obs) if takes_key else act(params, obs)

    if discrete is not None:
        start, n = discrete

        @jax.jit
        def probs(params, key, obs):
            inputs = inputs_of(params, key, obs)
            if deterministic:
                return jax.nn.one_hot(dist.greedy(inputs) - start, n)
            return jax.nn.softmax(inputs, axis=-1)

        return {"probs": probs}

    @functools.partial(jax.jit, static_argnames="m")
    def draw(params, act_key, obs, key, m):
        inputs = inputs_of(params, act_key, obs)
        keys = jax.random.split(key, m)
        return jnp.stack([dist.sample(inputs, k) for k in keys], axis=1)

    return {"logp": jax.jit(lambda params, key, obs, a: dist.logp(inputs_of(params, key, obs),
                                                                   a)),
            "greedy": jax.jit(lambda params, key, obs: dist.greedy(inputs_of(params, key, obs))),
            "draw": draw}


def _logp_of_actions(probs: np.ndarray, actions, start: int) -> np.ndarray:
    """`log probs[i, actions[i] - start]` per row (-inf where the probability is 0)."""
    idx = np.asarray(actions).astype(np.int64).reshape(-1) - start
    with np.errstate(divide="ignore"):
        return np.log(probs[np.arange(len(idx)), idx])


def clip_to(act_spec, actions: np.ndarray) -> np.ndarray:
    """Box actions `[N, m, ...]` clipped to the space's bounds.

    Args:
      act_spec: the Box action space's spec.
      actions: `[N, m, ...]` actions.
    """
    low = np.broadcast_to(np.asarray(act_spec.low, np.float32), tuple(act_spec.shape))
    high = np.broadcast_to(np.asarray(act_spec.high, np.float32), tuple(act_spec.shape))
    return np.clip(actions, low, high).astype(np.float32)


def _point_mass_logp(greedy: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """A point mass's log-density: +inf on its action, -inf elsewhere."""
    a = np.asarray(actions, np.float64).reshape(len(actions), -1)
    same = np.all(np.isclose(a, np.asarray(greedy, np.float64).reshape(len(a), -1)), axis=1)
    return np.where(same, np.inf, -np.inf)


def from_function(fn: Callable, act_spec) -> TargetPolicy:
    """A plain function as the target (its protocol in the module docstring).

    Args:
      fn: Discrete: `obs -> probabilities [N, n]`; Box: `obs -> (mean, std)`.
      act_spec: the action space (or its spec).

    Returns:
      The `TargetPolicy`.
    """
    act_spec = sp.to_spec(act_spec)
    if isinstance(act_spec, sp.DiscreteSpec):
        start = int(getattr(act_spec, "start", 0))

        def probs(obs):
            return np.asarray(fn(obs), np.float64)

        def logp(obs, actions):
            return _logp_of_actions(probs(obs), actions, start)

        return TargetPolicy(act_spec, False, logp, probs=probs)
    shape = tuple(act_spec.shape)

    def moments(obs):
        mean, std = fn(obs)
        return np.asarray(mean, np.float64), np.asarray(std, np.float64)

    def logp_box(obs, actions):
        mean, std = moments(obs)
        n = len(mean)
        a = np.asarray(actions, np.float64).reshape(n, -1)
        mean, std = mean.reshape(n, -1), std.reshape(n, -1)
        if np.all(std == 0):
            return _point_mass_logp(mean, a)
        z = (a - mean) / std
        return np.sum(-0.5 * z**2 - np.log(std) - 0.5 * math.log(2 * math.pi), axis=1)

    def samples(obs, m, seed=0):
        mean, std = moments(obs)
        rng = np.random.default_rng(seed)
        noise = rng.standard_normal((len(mean), m, *shape))
        return clip_to(act_spec, (mean[:, None] + std[:, None] * noise).astype(np.float32))

    return TargetPolicy(act_spec, False, logp_box, samples=samples)
