"""The estimators' maths on padded per-episode arrays, numpy only (no model, no policy).

Every estimator is a sum of per-episode contributions whose normalisers depend on which
episodes are drawn: written as a function of a count matrix `c [B, E]` (how often each of the
E episodes is in each of B draws), one call gives the point estimate (`c` all ones) and a
whole bootstrap (multinomial counts) as matrix products, with the weighted estimators'
self-normalisation recomputed on every resample as it must be.

Notation (Precup et al. 2000; Jiang & Li 2016; Thomas & Brunskill 2016), for episode i and
step t: `rho = pi(a|s) / mu(a|s)` from the target's and the behaviour's log-probabilities,
`w_t = prod_{t' <= t} rho_t'` (after an episode ends it keeps its last value and its rewards
are 0), `W = w_{T-1}`, `G = sum_t gamma^t r_t`:

* `is`  (trajectory-wise, ordinary):  mean_i W_i G_i
* `wis` (trajectory-wise, weighted):   sum_i W_i G_i / sum_i W_i
* `pdis` (per-decision, ordinary):     sum_t gamma^t mean_i w_t^i r_t^i
  (RLlib's ImportanceSampling)
* `wpdis` (per-decision, weighted):    sum_t gamma^t sum_i w_t^i r_t^i / sum_i w_t^i
  (RLlib's WeightedImportanceSampling normalises by the mean over episodes still running at
  t; here an ended episode keeps its weight in the normaliser, the textbook form)
* `dm` (direct method):                mean_i V(s_0^i), V from a fitted Q (`ope.fqe`)
* `dr` (doubly robust, per decision):  sum_t gamma^t sum_i [wn_t^i (r_t^i - Q_t^i)
  + wn_{t-1}^i V_t^i], `wn_t^i = w_t^i / N` (Jiang & Li's recursion unrolled, RLlib's
  DoublyRobust) or, weighted, `w_t^i / sum_j w_t^j` (Thomas & Brunskill's WDR), wn_{-1} = 1/N;
  where no episode's weight survives to step t (a greedy target), weighted DR's corrections
  from t on are 0 and it rests on the model (mean V(s_0) when none survives the first step),
  while WIS and WPDIS, which have no model, are nan there (0 / 0): `summarize` then says so
  with a `ZeroImportanceWeightsWarning` (and `ess` 0), never a silent nan.

Weights are never clipped: `effective_sample_size` reports how many episodes they amount to.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

from rljax_offline.errors import ZeroImportanceWeightsWarning

WEIGHTED = {"is": False, "wis": True, "pdis": False, "wpdis": True}


class EpisodeArrays(NamedTuple):
    """E episodes padded to T steps (float64). `mask` is 1 on real steps. `logp_behavior`
    and `logp_target` are the log-probabilities (or log-densities) of the recorded actions;
    `q` is Q(s_t, a_t) and `v` is V(s_t) = E_pi Q(s_t, .) of a fitted model (zeros where no
    model is fitted), `[E, T]`, or `[K, E, T]` for K bootstrap heads; all zero on padding.

    Attributes:
      rewards: `[E, T]` rewards.
      mask: `[E, T]` 1 on real steps.
      logp_behavior: `[E, T]` the behaviour's log-probabilities of the recorded actions.
      logp_target: `[E, T]` the target's.
      q: `[E, T]` or `[K, E, T]` the model's Q(s_t, a_t).
      v: `[E, T]` or `[K, E, T]` the model's V(s_t).
    """

    rewards: np.ndarray
    mask: np.ndarray
    logp_behavior: np.ndarray
    logp_target: np.ndarray
    q: np.ndarray
    v: np.ndarray

    @property
    def num_episodes(self) -> int:
        return int(self.rewards.shape[0])


def discounts(gamma: float, length: int) -> np.ndarray:
    """`[gamma^0, ..., gamma^(length - 1)]` in float64.

    Args:
      gamma: the discount.
      length: the number of steps.
    """
    return gamma ** np.arange(length, dtype=np.float64)


def log_weights(ep: EpisodeArrays) -> np.ndarray:
    """Cumulative log importance weights `log w_t` `[E, T]` (constant after an episode ends).
    `+inf - +inf` (a point-mass target on a point-mass behaviour's action) counts as a ratio
    of 1.

    Args:
      ep: the padded episodes.
    """
    with np.errstate(invalid="ignore"):
        step = np.where(ep.mask > 0, ep.logp_target - ep.logp_behavior, 0.0)
    both_inf = np.isinf(ep.logp_target) & np.isinf(ep.logp_behavior) & (
        np.sign(ep.logp_target) == np.sign(ep.logp_behavior))
    step = np.where(both_inf & (ep.mask > 0), 0.0, step)
    return np.cumsum(step, axis=1)


def _scaled(logw: np.ndarray) -> np.ndarray:
    """`w / max_i w` per column: the same ratios, no overflow (the weighted estimators'
    scale cancels)."""
    top = np.max(logw, axis=0, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    return np.exp(logw - top)


def _safe_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(y != 0, x / np.where(y != 0, y, 1.0), np.nan)


def _inv_or_zero(y: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", over="ignore"):
        return np.where(y > 0, 1.0 / np.where(y > 0, y, 1.0), 0.0)


def contributions(name: str, ep: EpisodeArrays, gamma: float, c: np.ndarray,
                  weighted_dr: bool = True) -> np.ndarray:
    """Per-episode contributions `[B, E]` to estimator `name` for counts `c [B, E]`; the
    estimate of draw b is `contributions[b].sum()`. `behavior`: the discounted return.

    Args:
      name: the estimator (`behavior`, `is`, `wis`, `pdis`, `wpdis`, `dm`, `dr`).
      ep: the padded episodes.
      gamma: the discount.
      c: `[B, E]` each draw's count of each episode.
      weighted_dr: DR's weighting.
    """
    c = np.asarray(c, np.float64)
    g = discounts(gamma, ep.rewards.shape[1])
    n = c.sum(axis=1, keepdims=True)  # [B, 1]
    returns = ep.rewards @ g  # [E]
    if name == "behavior":
        return c * returns / n
    if name == "dm":
        return c * ep.v[:, 0] / n
    logw = log_weights(ep)
    if name in ("is", "wis"):
        if WEIGHTED[name]:
            w = _scaled(logw[:, -1:])[:, 0]
            return c * w * returns / (c @ w)[:, None]
        return c * np.exp(logw[:, -1]) * returns / n
    if name in ("pdis", "wpdis"):
        if WEIGHTED[name]:
            w = _scaled(logw)
            x = w * ep.rewards * g  # [E, T]
            return c * (x @ _safe_div(1.0, c @ w).T).T
        return c * ((np.exp(logw) * ep.rewards) @ g) / n
    if name == "dr":
        w = _scaled(logw) if weighted_dr else np.exp(logw)
        w_prev = np.concatenate([np.ones_like(w[:, :1]), w[:, :-1]], axis=1)
        if weighted_dr:  # w_{t-1} of the same scale as its own normaliser
            w_prev = _scaled(np.concatenate([np.zeros_like(logw[:, :1]), logw[:, :-1]], 1))
        a = g * w * (ep.rewards - ep.q) * ep.mask
        b = g * w_prev * ep.v * ep.mask
        if weighted_dr:  # no surviving weight at t: the corrections stop, the model stays
            inv, inv_prev = _inv_or_zero(c @ w), _inv_or_zero(c @ w_prev)
        else:
            inv = inv_prev = np.broadcast_to(1.0 / n, (c.shape[0], w.shape[1]))
        return c * ((a @ inv.T) + (b @ inv_prev.T)).T
    raise ValueError(f"unknown estimator {name!r}")


def effective_sample_size(ep: EpisodeArrays) -> float:
    """Kish's effective sample size of the trajectory weights, `(sum W)^2 / sum W^2`: E when
    the target is the behaviour, near 1 when one episode carries all the weight, 0 when every
    weight is 0.

    Args:
      ep: the padded episodes.
    """
    w = _scaled(log_weights(ep)[:, -1:])[:, 0]
    total = float(np.sum(w))
    return 0.0 if total == 0 else total**2 / float(np.sum(w**2))


def bootstrap_counts(num_episodes: int, num_samples: int, seed: int) -> np.ndarray:
    """`[num_samples, E]` multinomial counts: episodes resampled with replacement.

    Args:
      num_episodes: E.
      num_samples: the draws.
      seed: their seed.
    """
    rng = np.random.default_rng(seed)
    return rng.multinomial(num_episodes, np.full(num_episodes, 1.0 / num_episodes),
                           size=num_samples).astype(np.float64)


def heads(ep: EpisodeArrays) -> list[EpisodeArrays]:
    """One `EpisodeArrays` per bootstrap head of the Q model (one when `q` is `[E, T]`).

    Args:
      ep: the padded episodes, with a `[K, E, T]` or `[E, T]` model.
    """
    if np.ndim(ep.q) == 2:
        return [ep]
    return [ep._replace(q=q, v=v) for q, v in zip(ep.q, ep.v)]


def _undefined(name: str, ess: float, num_episodes: int) -> str:
    if ess == 0:
        why = (f"every one of the {num_episodes} episodes has importance weight 0 (effective "
               "sample size 0): the target gives probability 0 to an action each episode "
               "took, as a greedy target does")
    else:
        why = (f"the importance weights underflow or vanish where it normalises (effective "
               f"sample size {ess:.3g} of {num_episodes} episodes)")
    return (f"OPE estimator {name!r}: v_target is nan: {why}; evaluate the target's action "
            "distribution (explore=True), or read 'fqe' / 'dr', which rest on a fitted model")


def summarize(name: str, ep: EpisodeArrays, gamma: float, *, weighted_dr: bool = True,
              num_bootstrap: int = 200, confidence: float = 0.95, seed: int = 0,
              uses_weights: bool = True, model_error=None) -> dict:
    """RLlib's OPE metrics for estimator `name` and a bootstrap interval on `v_target`.

    `v_behavior` / `v_target`: means over episodes of the per-episode values (for the
    weighted estimators, E times each episode's share, so the mean is the estimate);
    `*_std`: their standard deviations (numpy's `std`, as RLlib); `v_gain`:
    `v_target / max(v_behavior, 1e-8)` and `v_delta`: `v_target - v_behavior` (RLlib's
    definitions: `v_gain` means nothing for negative returns, read `v_delta` there);
    `v_target_ci`: the percentile bootstrap interval over episodes resampled with
    replacement (`num_bootstrap` draws); `ess`: `effective_sample_size` (None for `dm`,
    which uses no weights).

    With K bootstrap heads of the Q model (`q`, `v` `[K, E, T]`, `ope.fqe`): the estimate is
    the mean over heads of each head's estimate, and draw b of the interval evaluates head
    `b mod K` on its own episode resample, so the interval holds the model's spread (each
    head fitted on its own resample) as well as the episodes' (the law of total variance);
    `v_target_model_std` is the heads' spread alone.

    `model_error` (`[K]`, one per head, or None): a bound on each head's distance to its
    Bellman fixed point (`ope.fqe.convergence_bound`). `dm` rests on the model alone, so its
    interval is widened by the mean of the bounds on both sides (`v_target_model_error`;
    `v_target_ci_bootstrap` keeps the episodes' interval alone). `dr` is left as it is: its
    importance-weighted corrections have mean zero for any model error (E_mu[rho (Q - Q')]
    = V - V'), so it turns into variance, which its bootstrap sees.

    Args:
      name: the estimator.
      ep: the padded episodes.
      gamma: the discount.
      weighted_dr: DR's weighting.
      num_bootstrap: the interval's draws.
      confidence: the interval's confidence level.
      seed: the draws' seed.
      uses_weights: report `ess` (False for `dm`).
      model_error: `[K]` bounds on each head's distance to its fixed point, or None.
    """
    E = ep.num_episodes
    ones = np.ones((1, E))
    per_head = heads(ep)
    K = len(per_head)
    # Weights that all underflow (a target far from every recorded action) give 0 / 0: nan,
    # reported as such; such bootstrap draws are left out of the interval.
    with np.errstate(all="ignore"):
        each = np.stack([E * contributions(name, h, gamma, ones, weighted_dr)[0]
                         for h in per_head])  # [K, E]
        per_target = each.mean(axis=0)
        per_behavior = E * contributions("behavior", ep, gamma, ones)[0]
        counts = bootstrap_counts(E, num_bootstrap, seed)
        draws = np.concatenate([
            contributions(name, h, gamma, counts[k::K], weighted_dr).sum(axis=1)
            for k, h in enumerate(per_head)])
    v_behavior, v_target = float(np.mean(per_behavior)), float(np.mean(per_target))
    ess = effective_sample_size(ep) if uses_weights else None
    if uses_weights and not np.isfinite(v_target):
        warnings.warn(_undefined(name, ess, E), ZeroImportanceWeightsWarning, stacklevel=2)
    alpha = (1.0 - confidence) / 2.0
    finite = draws[np.isfinite(draws)]
    lo, hi = ((float(np.quantile(finite, alpha)), float(np.quantile(finite, 1.0 - alpha)))
              if finite.size else (float("nan"), float("nan")))
    widen = (float(np.mean(model_error)) if name == "dm" and model_error is not None
             else None)
    return {
        "v_behavior": v_behavior, "v_behavior_std": float(np.std(per_behavior)),
        "v_target": v_target, "v_target_std": float(np.std(per_target)),
        "v_gain": v_target / max(v_behavior, 1e-8), "v_delta": v_target - v_behavior,
        "v_target_ci": (lo - (widen or 0.0), hi + (widen or 0.0)),
        "v_target_ci_bootstrap": (lo, hi), "v_target_model_error": widen,
        "confidence": confidence,
        "ess": ess,
        "v_target_model_std": float(np.std(each.mean(axis=1))) if K > 1 else None,
        "num_episodes": E,
    }
