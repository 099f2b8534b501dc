"""Fitted Q evaluation (Le et al. 2019): a Q network for the *target* policy, trained on the
offline data by the learner core like any algorithm's networks.

FQE is a `LearningSpec` of one `Loss`: the squared TD error of `Q(s, a)` against
`r + gamma * (1 - terminated) * E_{a' ~ pi(s')} Q_target(s', a')`, with hard target copies
every `target_update_period` updates. `DataParallel.scan_on_device` runs it: the columns live
on the devices, sharded on rows, and `num_updates` updates are one jitted `lax.scan` with
on-device sampling, over every local device (the same result on 1 or 8, up to float
summation order).

The target policy enters as data, computed once by its acting module before the fit (its
params do not change): for Discrete actions its probabilities at `s'` (`next_pi [N, n]`, the
expectation over actions is exact; a greedy policy's are one-hot), for Box actions
`num_action_samples` actions drawn from it at `s'` (`next_pi_actions [N, m, ...]`; a greedy
policy's are its mean action, m copies). Truncated steps bootstrap (RLlib's `terminateds`).

Bootstrapped FQE (`bootstrap_heads = K > 1`): K Q networks (`models.networks.ensemble`, each
its own initialisation) fitted together in the same jitted program, head k on its own
bootstrap resample of the episodes: each episode gets a Poisson(1) count per head (the
column `boot_w [N, K]`, every row its episode's counts), which weights that head's squared
TD errors. Each head's fit is then one draw of "resample the episodes, fit FQE", so the
heads' spread is the model's error (data and optimisation); the heads are independent (the
sum of their losses has no cross terms and Adam scales each parameter alone). K = 1 is the
plain fit on every row, weight 1.

Convergence bound: the heads' spread cannot show a bias every fit shares, and a fit stopped
before its fixed point has one (CartPole's good policies in `benchmarks/ope.py`: FQE still
climbing by ~4 per 10 backups after 80 of them, diverging when run longer). FQE iterates the
target policy's Bellman operator, a gamma-contraction in the sup norm, so an iterate lies
within `gamma^m / (1 - gamma^m)` times its change over the last m backups of the fixed point
(Banach's a posteriori bound): the params at the fit's middle (a whole number of backups
before its end) are kept, and `convergence_bound` measures the largest change of Q(s, a)
and V(s) over the data's rows since then. `dm`'s interval is widened by it
(`ope.estimators.summarize`).
"""

from __future__ import annotations

import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.learning.data_parallel import DataParallel, select_devices
from rljax_offline.learning.init import init_state
from rljax_offline.learning.losses import not_terminal, take_action
from rljax_offline.learning.optim import make_optimizer
from rljax_offline.learning.spec import LearningSpec, Loss
from rljax_offline.models.networks import continuous_q_network, discrete_q_network, ensemble
from rljax_offline.ope.methods import FQEOptions


def fqe_columns(act_spec) -> tuple:
    """The learner columns FQE reads.

    Args:
      act_spec: the action space's spec (Discrete reads `next_pi`, Box `next_pi_actions`).
    """
    base = ("obs", "actions", "rewards", "new_obs", "terminateds")
    return (*base, "next_pi" if isinstance(act_spec, sp.DiscreteSpec) else "next_pi_actions",
            "boot_w")


def bootstrap_weights(lengths, num_heads: int, seed: int) -> np.ndarray:
    """`boot_w [sum(lengths), K]`: a Poisson(1) count per episode and head, repeated over the
    episode's rows (all ones for K = 1: the plain fit). A resample that draws no episode at
    all (probability e^-E) is redrawn.

    Args:
      lengths: each episode's number of rows, in row order.
      num_heads: K, the bootstrap heads.
      seed: the draws' seed.
    """
    lengths = np.asarray(lengths, np.int64)
    if num_heads == 1:
        return np.ones((int(lengths.sum()), 1), np.float32)
    rng = np.random.default_rng(seed)
    counts = rng.poisson(1.0, (len(lengths), num_heads))
    while (counts.sum(axis=0) == 0).any():
        counts = rng.poisson(1.0, (len(lengths), num_heads))
    return np.repeat(counts, lengths, axis=0).astype(np.float32)


def _repeat(tree, m: int):
    return jax.tree_util.tree_map(lambda x: jnp.repeat(x, m, axis=0), tree)


def make_q(obs_spec, act_spec, options: FQEOptions):
    """`(network, q_sa(params, obs, actions) -> [N], v(params, obs, pi) -> [N])`: `pi` is
    the target's probabilities `[N, n]` (Discrete) or its sampled actions `[N, m, ...]`.

    Args:
      obs_spec: the observation space's spec.
      act_spec: the action space's spec.
      options: FQE's settings (the network's `model_config`).
    """
    if isinstance(act_spec, sp.DiscreteSpec):
        q = discrete_q_network(obs_spec, act_spec, options.model_config)

        def q_sa(params, obs, actions):
            return take_action(q.apply(params, obs), actions)

        def v(params, obs, pi):
            return jnp.sum(pi * q.apply(params, obs), axis=-1)

        return q, q_sa, v
    q = continuous_q_network(obs_spec, act_spec, options.model_config)

    def q_sa_box(params, obs, actions):
        return q.apply(params, obs, actions)

    def v_box(params, obs, pi_actions):
        n, m = pi_actions.shape[:2]
        flat = pi_actions.reshape(n * m, *pi_actions.shape[2:])
        return q.apply(params, _repeat(obs, m), flat).reshape(n, m).mean(axis=1)

    return q, q_sa_box, v_box


def fqe_learning(obs_spec, act_spec, gamma: float, options: FQEOptions) -> LearningSpec:
    """FQE as the learner core's `LearningSpec` (see the module docstring): `q` holds
    `bootstrap_heads` networks (a leading axis), each weighted by its `boot_w` column.

    Args:
      obs_spec: the observation space's spec.
      act_spec: the action space's spec.
      gamma: the discount.
      options: FQE's settings.
    """
    q, q_sa, v = make_q(obs_spec, act_spec, options)
    heads = ensemble(q, options.bootstrap_heads)
    pi_key = "next_pi" if isinstance(act_spec, sp.DiscreteSpec) else "next_pi_actions"

    def loss(params, batch, rng, axis):
        del rng, axis
        v_next = jax.vmap(v, (0, None, None))(params["target_q"], batch["new_obs"],
                                              batch[pi_key])  # [K, N]
        y = jax.lax.stop_gradient(batch["rewards"] + gamma * not_terminal(batch) * v_next)
        pred = jax.vmap(q_sa, (0, None, None))(params["q"], batch["obs"], batch["actions"])
        err = (pred - y) ** 2
        return jnp.sum(batch["boot_w"].T * err, axis=0), {"fqe_loss": err.mean(axis=0),
                                                         "q_mean": pred.mean(axis=0)}

    return LearningSpec(
        init=lambda rng: {"q": heads.init(rng)},
        losses=(Loss("fqe", ("q",), loss, make_optimizer(options.lr)),),
        targets={"target_q": "q"}, tau=1.0,
        target_update_period=options.target_update_period)


def segments(num_updates: int, period: int, chunk: int = 1000) -> tuple[list[int], int]:
    """The fit's `lax.scan` calls (at most `chunk` updates each) and the index of the first
    call of the compared span: the second half of the fit in whole backups (the largest
    multiple of `period` up to `num_updates // 2`, or every update when that is less than a
    period), so that the params before it are an earlier iterate of the same fit
    (`FQEFit.q_sa_prev`). Half the fit: the more backups compared, the smaller the factor
    `gamma^m / (1 - gamma^m)` on the optimiser's noise in the change.

    Args:
      num_updates: the fit's updates.
      period: updates per backup (`target_update_period`).
      chunk: updates per `lax.scan` call at most.
    """
    span = num_updates // 2
    span = span - span % period if span >= period else num_updates
    head = num_updates - span

    def cut(n):
        return [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])

    first = cut(head)
    return first + cut(span), len(first)


class FQEFit(NamedTuple):
    """A fitted Q, as host functions with one row per bootstrap head.

    Attributes:
      q_sa: `q_sa(obs, actions) -> [K, N]`, each head's Q of the logged actions.
      v: `v(obs, pi) -> [K, N]`, each head's value under the target policy (`pi`: its
        probabilities, or its sampled actions for Box spaces).
      metrics: the fit's figures (`fqe_updates_per_s` leaves out the first scan call,
        which compiles; nan when there is no other).
      q_sa_prev: `q_sa` of the iterate `metrics["fqe_backups_compared"]` backups (target
        copies) earlier, for `convergence_bound`.
      v_prev: `v` of that earlier iterate.
    """

    q_sa: object
    v: object
    metrics: dict
    q_sa_prev: object = None
    v_prev: object = None


def convergence_bound(change: np.ndarray, gamma: float, backups: float) -> np.ndarray:
    """Banach's a posteriori bound for a gamma-contraction: an iterate m steps of the Bellman
    operator after another lies within `gamma^m / (1 - gamma^m)` times their distance (sup
    norm) of the fixed point. `change`: that distance per head, `max |Q_k - Q_{k-m}|` over
    the quantities the estimators read; inf when no backup separates the two.

    Args:
      change: per head, the largest change of the estimated quantities over `backups`.
      gamma: the discount.
      backups: m, the backups between the two iterates (0: none; the bound is inf).

    Returns:
      The bound per head.
    """
    g = gamma ** max(float(backups), 0.0)
    if g >= 1.0:
        return np.full(np.shape(change), np.inf)
    return np.asarray(change, np.float64) * g / (1.0 - g)


def fit_fqe(columns: dict, obs_spec, act_spec, gamma: float,
            options: FQEOptions | None = None, episode_lengths=None) -> FQEFit:
    """Fits FQE on `columns` with `DataParallel` (see the module docstring).

    The batch size is rounded up to a multiple of the device count.

    Args:
      columns: host arrays, the `fqe_columns` of the action space (all but `boot_w`,
        which is made here unless given).
      obs_spec: the observation space's spec (the Q network's input).
      act_spec: the action space's spec.
      gamma: the discount.
      options: FQE's settings (default `FQEOptions()`).
      episode_lengths: the episodes' lengths, rows in episode order: the bootstrap
        resamples whole episodes; None resamples rows.

    Returns:
      The fitted Q functions, their earlier iterate and the fit's metrics (`FQEFit`).
    """
    options = options or FQEOptions()
    if "boot_w" not in columns:
        n_rows = len(columns["rewards"])
        lengths = [1] * n_rows if episode_lengths is None else episode_lengths
        columns = {**columns, "boot_w": bootstrap_weights(lengths, options.bootstrap_heads,
                                                          options.seed + 3)}
    devices = select_devices(options.num_devices)
    n = len(devices)
    batch = -(-options.train_batch_size // n) * n
    learning = fqe_learning(obs_spec, act_spec, gamma, options)
    dp = DataParallel(learning, devices, batch, mode=options.update_mode)
    state = dp.put_replicated(init_state(learning, options.seed))
    data = dp.put_data({k: np.asarray(v) for k, v in columns.items()})
    scans: dict = {}
    t_run, measured, metrics = 0.0, 0, {}
    parts, compared_from = segments(options.num_updates, options.target_update_period)
    prev = None
    for i, length in enumerate(parts):
        if i == compared_from:
            prev = jax.device_get(state.params["q"])
        if length not in scans:
            scans[length] = dp.scan_on_device(length)
        t0 = time.perf_counter()
        state, metrics = scans[length](state, data)
        metrics = jax.device_get(metrics)
        if i:  # the first call compiles
            t_run += time.perf_counter() - t0
            measured += length
    params = jax.device_get(state.params["q"])
    _, q_sa, v = make_q(obs_spec, act_spec, options)
    q_sa_j = jax.jit(jax.vmap(q_sa, (0, None, None)))
    v_j = jax.jit(jax.vmap(v, (0, None, None)))
    out = {"fqe_loss": float(metrics["fqe_loss"]), "fqe_q_mean": float(metrics["q_mean"]),
           "fqe_num_updates": options.num_updates,
           "fqe_bootstrap_heads": options.bootstrap_heads,
           "fqe_backups_compared": sum(parts[compared_from:]) / options.target_update_period,
           "fqe_updates_per_s": measured / t_run if t_run > 0 else float("nan")}

    def at(p):
        return (lambda obs, actions: np.asarray(q_sa_j(p, obs, actions), np.float64),
                lambda obs, pi: np.asarray(v_j(p, obs, pi), np.float64))

    return FQEFit(*at(params), out, *at(prev))
