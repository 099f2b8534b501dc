"""Running a set of estimators for one target policy on columns of whole episodes: the one
code path behind `Algorithm.train()`'s `off_policy_estimator` results, `ope.estimate` and
`rljax-offline evaluate --offline`.

Checks first, each a one-line named error: the target's action space against the data's, the
behaviour's `action_logp` for the importance-weighted estimators, a deterministic Box target
(no density) for them. Then the target's log-probabilities of the recorded actions, one FQE
fit (of `bootstrap_heads` Q networks, `ope.fqe`) shared by the estimators that need a Q model
(`dm`, `dr`) with the same settings, the per-episode arrays and each estimator's summary
(`ope.estimators.summarize`).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.errors import ActionSpaceMismatchError, MissingActionLogpError, OPEError
from rljax_offline.ope.data import LOGP, pad
from rljax_offline.ope.estimators import EpisodeArrays, summarize
from rljax_offline.ope.fqe import FQEFit, bootstrap_weights, convergence_bound, fit_fqe, fqe_columns
from rljax_offline.ope.methods import Method
from rljax_offline.ope.target import TargetPolicy


def _kind(spec) -> str:
    return "Discrete" if isinstance(spec, sp.DiscreteSpec) else type(spec).__name__.replace(
        "Spec", "")


def check_inputs(methods: dict[str, Method], columns: dict, target: TargetPolicy,
                 data_act_spec) -> None:
    """The named errors of the module docstring, before any work.

    Args:
      methods: name -> `Method`.
      columns: the OPE columns (their names tell whether `action_logp` was recorded).
      target: the target policy.
      data_act_spec: the data's action space.
    """
    data_act_spec = sp.to_spec(data_act_spec)
    if type(sp.to_spec(target.act_spec)) is not type(data_act_spec):
        raise ActionSpaceMismatchError(
            f"the target policy acts in a {_kind(target.act_spec)} action space, the data's "
            f"actions are {_kind(data_act_spec)} ({data_act_spec}); evaluate a policy "
            "trained for this data's action space")
    weighted = sorted(n for n, m in methods.items() if m.needs_weights)
    if weighted and LOGP not in columns:
        raise MissingActionLogpError(
            f"estimators {weighted} need the behaviour policy's 'action_logp' column, which "
            "the data lacks: record it (EnvRunner with a stochastic policy, the behaviour "
            "mixes of acting.behavior) or use only 'fqe' (no importance weights)")
    if weighted and target.deterministic and not target.discrete:
        raise deterministic_box_error(weighted)


def deterministic_box_error(weighted: list[str]) -> OPEError:
    """The error for importance weights asked of a deterministic Box target (no density).

    Args:
      weighted: the estimators that need importance weights.
    """
    return OPEError(f"estimators {weighted} need the target's density of the recorded Box "
                    "actions, and a deterministic Box target has none: evaluate it with "
                    "'fqe', or its stochastic policy (explore=True)")


def _fqe(columns: dict, lengths: list[int], target: TargetPolicy, obs_spec, gamma: float,
         method: Method) -> FQEFit:
    opts = method.fqe
    cols = {k: columns[k] for k in fqe_columns(target.act_spec)[:5]}
    cols["boot_w"] = bootstrap_weights(lengths, opts.bootstrap_heads, opts.seed + 3)
    if target.discrete:
        cols["next_pi"] = target.probs(columns["new_obs"]).astype(np.float32)
    else:
        cols["next_pi_actions"] = target.samples(columns["new_obs"], opts.num_action_samples,
                                                 opts.seed + 1).astype(np.float32)
    cols["actions"] = np.asarray(cols["actions"])
    cols["terminateds"] = np.asarray(cols["terminateds"], np.float32)
    cols["rewards"] = np.asarray(cols["rewards"], np.float32)
    return fit_fqe(cols, obs_spec, target.act_spec, gamma, opts)


def _q_and_v(fit: FQEFit, columns: dict, target: TargetPolicy, method: Method, gamma: float):
    """Q(s_t, a_t) and V(s_t) of every head, `[K, N]` each, and each head's convergence bound
    `[K]` (`ope.fqe.convergence_bound` of their largest change over the last backups)."""
    obs = columns["obs"]
    n = len(columns["rewards"])
    k = method.fqe.bootstrap_heads
    q, v = np.zeros((k, n)), np.zeros((k, n))
    change = np.zeros(k)
    step = 8192
    pi = (target.probs(obs) if target.discrete
          else target.samples(obs, method.fqe.num_action_samples, method.fqe.seed + 2))
    for i in range(0, n, step):
        rows = jax.tree_util.tree_map(lambda x, i=i: x[i:i + step], obs)
        acts, p = np.asarray(columns["actions"][i:i + step]), np.asarray(pi[i:i + step],
                                                                         np.float32)
        q[:, i:i + step], v[:, i:i + step] = fit.q_sa(rows, acts), fit.v(rows, p)
        delta = np.maximum(np.abs(q[:, i:i + step] - fit.q_sa_prev(rows, acts)),
                           np.abs(v[:, i:i + step] - fit.v_prev(rows, p)))
        change = np.maximum(change, delta.max(axis=1, initial=0.0))
    bound = convergence_bound(change, gamma, fit.metrics["fqe_backups_compared"])
    return q, v, bound


def _pad_heads(values: np.ndarray, lengths: list[int]) -> np.ndarray:
    """`[N]` -> `[E, T]`; `[K, N]` (one row per bootstrap head) -> `[K, E, T]`."""
    if values.ndim == 1:
        return pad(values, lengths)
    return np.stack([pad(x, lengths) for x in values])


def run(methods: dict[str, Method], columns: dict, lengths: list[int], target: TargetPolicy,
        obs_spec: Any, data_act_spec: Any, gamma: float, *, num_bootstrap: int = 200,
        confidence: float = 0.95, seed: int = 0) -> dict[str, dict]:
    """`{name: RLlib's OPE metrics + v_target_ci + ess + (FQE's fit figures)}` for each
    method, on `columns` (rows of whole episodes in order, `lengths` each).

    Args:
      methods: name -> `Method`.
      columns: the OPE columns, rows of whole episodes in order.
      lengths: each episode's number of rows.
      target: the target policy.
      obs_spec: the observation spec FQE's network reads.
      data_act_spec: the data's action space.
      gamma: the discount.
      num_bootstrap: the interval's draws.
      confidence: the interval's confidence level.
      seed: the seed of the draws and the fits.
    """
    check_inputs(methods, columns, target, data_act_spec)
    if not lengths or sum(lengths) == 0:
        raise OPEError("no episodes to evaluate on")
    zeros = np.zeros(len(columns["rewards"]))
    behavior = columns[LOGP] if LOGP in columns else zeros
    needs_weights = any(m.needs_weights for m in methods.values())
    target_logp = (target.logp(columns["obs"], np.asarray(columns["actions"]))
                   if needs_weights else zeros)
    if not target.discrete and np.isposinf(target_logp).any():  # a point-mass function
        raise deterministic_box_error(sorted(n for n, m in methods.items() if m.needs_weights))
    fits: dict = {}
    results = {}
    for name, m in methods.items():
        q = v = zeros
        bound = None
        extra: dict = {}
        if m.needs_q:
            key = repr(m.fqe)  # FQEOptions holds a dict: its repr is the cache key
            if key not in fits:
                fit = _fqe(columns, lengths, target, obs_spec, gamma, m)
                fits[key] = (fit, *_q_and_v(fit, columns, target, m, gamma))
            fit, q, v, bound = fits[key]
            extra = {**fit.metrics, "fqe_convergence_bound": float(np.mean(bound))}
        ep = EpisodeArrays(rewards=pad(columns["rewards"], lengths),
                           mask=pad(np.ones(len(zeros)), lengths),
                           logp_behavior=pad(behavior, lengths),
                           logp_target=pad(target_logp, lengths),
                           q=_pad_heads(q, lengths), v=_pad_heads(v, lengths))
        results[name] = {**summarize(m.kind, ep, gamma, weighted_dr=m.weighted,
                                     num_bootstrap=num_bootstrap, confidence=confidence,
                                     seed=seed, uses_weights=m.needs_weights,
                                     model_error=bound), **extra}
    return results
