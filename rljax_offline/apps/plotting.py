"""Pictures a person would rather look at than read: learning curves and return histograms.

matplotlib with the non-interactive Agg backend, so it works on headless machines and in CI.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence

import numpy as np


def _figure(ncols: int, width: float = 5.0):
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, 3.8), squeeze=False)
    return plt, fig, axes[0]


def _save_atomic(plt, fig, path: str) -> str:
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".png", dir=folder)
    os.close(fd)
    try:
        fig.tight_layout()
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def _count_label(x: float, _pos=None) -> str:
    """Tick labels for counts: `120k`, `1.5M` (six-digit numbers side by side run together)."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale and abs(x) >= 10_000:
            return f"{x / scale:.4g}{suffix}"
    return f"{x:.4g}"


def _readable_counts(axis) -> None:
    """At most 6 whole-number ticks, labelled compactly, never with an offset."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    axis.set_major_locator(MaxNLocator(nbins=6, integer=True, min_n_ticks=3))
    axis.set_major_formatter(FuncFormatter(_count_label))


X_AXES = {"iteration": "training iteration", "updates": "gradient updates",
          "samples": "timesteps trained on"}


def main_loss(learner_metrics: dict) -> tuple[str, float] | None:
    """The loss a curve shows: the total loss (mean over the iteration's updates) where the
    algorithm reports one, else its policy or Q loss; None for an iteration that made no
    update (SAC before `num_steps_sampled_before_learning_starts`)."""
    for name in ("total_loss", "policy_loss", "qf_loss", "vf_loss"):
        for key in (f"{name}_mean", name):
            if key in learner_metrics:
                return name, learner_metrics[key]
    return None


def first_module_metrics(result: dict) -> dict:
    """The learner metrics a summary shows: `default_policy`'s, else (several modules) the
    first trained module's in name order; `{}` where no module trained."""
    learners = result.get("learners", {})
    if "default_policy" in learners:
        return learners["default_policy"]
    modules = sorted(m for m in learners if m != "__all_modules__")
    return learners[modules[0]] if modules else {}


def _x_value(result: dict, x_axis: str, updates_per_iteration: int | None) -> float:
    """Where a result sits on the x-axis: its iteration, updates so far, or samples so far."""
    it = result["training_iteration"]
    if x_axis == "iteration":
        return it
    if x_axis == "samples":
        return result["learners"]["__all_modules__"]["num_env_steps_trained_lifetime"]
    if updates_per_iteration is None:
        raise ValueError("x_axis='updates' needs updates_per_iteration")
    return it * updates_per_iteration


def save_learning_curve(history: Sequence[dict], path: str, *, title: str = "training",
                        target_return: float | None = None, x_axis: str = "iteration",
                        updates_per_iteration: int | None = None) -> str:
    """Plots training loss and evaluation return from `Algorithm.train()` results, against
    training iterations, gradient updates or timesteps trained on (`x_axis`).

    Args:
      history: result dicts with `training_iteration`, `learners/<module>/<loss>` (the
        first module's: `first_module_metrics`)
        and, where evaluated, `evaluation/env_runners/episode_return_mean` (nested dicts).
      path: where to write the PNG (atomically).
      target_return: draws a dashed line at this return (e.g. 450 for CartPole).
      x_axis: "iteration", "updates" (needs `updates_per_iteration`) or "samples".
    """
    if x_axis not in X_AXES:
        raise ValueError(f"x_axis must be one of {sorted(X_AXES)}, got {x_axis!r}")
    plt, fig, (ax_loss, ax_ret) = _figure(2)
    named = [(r, main_loss(first_module_metrics(r))) for r in history]
    named = [(r, n) for r, n in named if n is not None]  # iterations that made updates
    it = [_x_value(r, x_axis, updates_per_iteration) for r, _ in named]
    loss = [n[1] for _, n in named]
    loss_name = named[0][1][0] if named else "loss"
    ax_loss.plot(it, loss, color="tab:blue")
    for ax in (ax_loss, ax_ret):
        _readable_counts(ax.xaxis)
    ax_loss.set_xlabel(X_AXES[x_axis])
    ax_loss.set_ylabel(loss_name.replace("_", " "))
    ax_loss.set_yscale("log" if loss and min(loss) > 0 else "linear")
    ax_loss.set_title(f"{title}: loss")
    ev = [(_x_value(r, x_axis, updates_per_iteration), r["evaluation"]["env_runners"])
          for r in history if "evaluation" in r]
    if ev:
        xs = [i for i, _ in ev]
        mean = np.array([e["episode_return_mean"] for _, e in ev])
        lo = np.array([e["episode_return_min"] for _, e in ev])
        hi = np.array([e["episode_return_max"] for _, e in ev])
        ax_ret.plot(xs, mean, marker="o", color="tab:green", label="mean")
        ax_ret.fill_between(xs, lo, hi, color="tab:green", alpha=0.2, label="min-max")
        if target_return is not None:
            ax_ret.axhline(target_return, ls="--", color="gray", label=f"target {target_return}")
        ax_ret.legend(loc="lower right")
    ax_ret.set_xlabel(X_AXES[x_axis])
    ax_ret.set_ylabel("evaluation episode return")
    ax_ret.set_title(f"{title}: evaluation")
    return _save_atomic(plt, fig, path)


def save_return_histogram(returns: dict[str, Sequence[float]], path: str,
                          *, title: str = "Episode returns") -> str:
    """Overlaid histograms of episode returns, e.g. {"expert data": [...], "BC policy": [...]}."""
    plt, fig, (ax,) = _figure(1, width=6.0)
    all_values = np.concatenate([np.asarray(v, float) for v in returns.values()])
    lo, hi = float(all_values.min()), float(all_values.max())
    if hi - lo < 1e-6 * max(1.0, abs(hi)):
        # All returns equal (an expert at CartPole's 500): one bar centred on the value on a
        # readable axis, not 30 bins across [500, 500 + 1e-6] drawn with an offset.
        pad = max(0.5, 0.02 * abs(hi))
        bins = np.linspace(lo - pad, hi + pad, 12)
    else:
        bins = np.linspace(lo, hi, 31)
    for name, values in returns.items():
        # Fractions, not counts: a 500-episode data set and a 20-episode evaluation compare.
        weights = np.full(len(values), 1.0 / max(len(values), 1))
        ax.hist(values, bins=bins, weights=weights, alpha=0.55, label=f"{name} (n={len(values)})")
    ax.ticklabel_format(axis="x", useOffset=False, style="plain")
    ax.set_xlabel("episode return")
    ax.set_ylabel("fraction of episodes")
    ax.set_title(title)
    ax.legend()
    return _save_atomic(plt, fig, path)


def save_workflow_curves(ppo: Sequence[tuple], bc: Sequence[tuple], finetuned: Sequence[tuple],
                         path: str, *, target: float | None = None,
                         data_return: float | None = None,
                         title: str = "CartPole-v1: PPO expert -> record -> BC -> fine-tune"
                         ) -> str:
    """RLlib's offline-data guide in one figure: episode return against env steps for PPO
    from scratch and PPO fine-tuned from the BC clone (left), and the BC clone's evaluation
    return against its updates, beside the recorded data's mean return (right).
    Curves are `[(x, return)]`."""
    plt, fig, (left, right) = _figure(2)
    for name, curve, style in (("PPO from scratch", ppo, "-"),
                               ("PPO fine-tuned from BC", finetuned, "-")):
        if curve:
            x, y = zip(*curve)
            left.plot(x, y, style, marker=".", label=name)
    left.set_xlabel("env steps sampled")
    left.set_ylabel("episode return mean")
    if bc:
        x, y = zip(*bc)
        right.plot(x, y, marker="o", color="tab:green", label="BC on the recording")
    if data_return is not None:
        right.axhline(data_return, color="tab:gray", ls=":", label="recorded data mean")
    right.set_xlabel("BC updates")
    right.set_ylabel("evaluation return mean")
    for ax in (left, right):
        _readable_counts(ax.xaxis)
        if target is not None:
            ax.axhline(target, color="tab:red", ls="--", lw=1, label=f"target {target:g}")
        ax.legend(loc="lower right")
    fig.suptitle(title)
    return _save_atomic(plt, fig, path)


def save_ope_estimates(rows: Sequence[dict], path: str, *, title: str = "off-policy estimates"
                       ) -> str:
    """Each checkpoint's estimates with their intervals, one marker per method side by side,
    and its env return where one was measured (a black bar). `rows`: `{"label": str,
    "estimates": {method: {"v_target", "v_target_ci"}}, "true": float or None}`."""
    plt, fig, (ax,) = _figure(1, width=max(5.0, 1.2 * len(rows) + 2.0))
    methods = sorted({m for r in rows for m in r["estimates"]})
    width = 0.8 / max(len(methods), 1)
    for j, m in enumerate(methods):
        xs, ys, lo, hi = [], [], [], []
        for i, r in enumerate(rows):
            est = r["estimates"].get(m)
            if est is None:
                continue
            xs.append(i - 0.4 + width * (j + 0.5))
            ys.append(est["v_target"])
            lo.append(est["v_target"] - est["v_target_ci"][0])
            hi.append(est["v_target_ci"][1] - est["v_target"])
        ax.errorbar(xs, ys, yerr=[np.maximum(lo, 0), np.maximum(hi, 0)], fmt="o", ms=4,
                    capsize=3, label=m)
    for i, r in enumerate(rows):
        if r.get("true") is not None:
            ax.hlines(r["true"], i - 0.45, i + 0.45, colors="black", linewidth=2,
                      label="env return" if i == 0 else None)
    ax.set_xticks(range(len(rows)), [r["label"] for r in rows], rotation=15)
    ax.set_ylabel("discounted return")
    ax.set_title(title)
    ax.legend(fontsize=8, ncol=2)
    return _save_atomic(plt, fig, path)


def save_fine_tuning_curves(runs: Sequence[dict], path: str, *, target: float | None = None,
                            title: str = "fine-tuning online") -> str:
    """Online return against env steps, one panel per seed, one line per start (`runs`:
    dicts with `seed`, `from` (the start's name) and `curve`, `[(env steps, return)]`), the
    target return dashed."""
    seeds = sorted({r["seed"] for r in runs})
    plt, fig, axes = _figure(len(seeds), width=4.0)
    axes = np.atleast_1d(axes)
    for ax, seed in zip(axes, seeds):
        for run in (r for r in runs if r["seed"] == seed):
            x, y = zip(*run["curve"])
            ax.plot(x, y, marker=".", label=f"from {run['from']}")
        if target is not None:
            ax.axhline(target, color="tab:red", ls="--", lw=1, label=f"target {target:g}")
        ax.set_title(f"seed {seed}")
        ax.set_xlabel("env steps sampled")
        _readable_counts(ax.xaxis)
    axes[0].set_ylabel("evaluation return mean")
    axes[-1].legend(loc="lower right")
    fig.suptitle(title)
    return _save_atomic(plt, fig, path)
