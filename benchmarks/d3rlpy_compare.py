"""rljax_offline against d3rlpy 2.8 at convergence, on the same data, in the same command.

Each case trains ours and d3rlpy's matching algorithm on the same recording
(`rljax_offline.apps.recipes`' mixed-quality CartPole and Pendulum sets, or for the
`ALGO-hopper-medium[-replay]` cases the Hopper sets under `--data-root`, made there with
`rljax-offline datasets make NAME --env-steps 60000` when missing; our Parquet, and d3rlpy
gets the same transitions as an `MDPDataset`), with the same batch size (d3rlpy's default) and
number of updates, several seeds, and evaluates the greedy policy on 10 episodes after each
tenth of the run (`_offline_runs.py`). d3rlpy runs at its defaults (Box actions scaled to the
env's bounds with `MinMaxActionScaler`, TD3+BC with its standard observation scaler); ours at
our defaults, which the docs' d3rlpy parity page compares with RLlib's and d3rlpy's.

Printed per case: the level (mean of the last three evaluations) as mean +- std over seeds
for each library, the best single evaluation (information only: one evaluation is noise),
updates/s of each (each part's mean time per update, evaluation and the first, compiling part
excluded, the same reduction for both) and their ratio. Then the final policies' paired
evaluation (`_paired_eval`, `--final-episodes`, 100 by default): both libraries' last policies
on the same start states, each side's mean over seeds and episodes, and the difference
ours - d3rlpy with its standard error over seeds. A level of three 10-episode evaluations
carries the spread of returns over start states (on Pendulum -1 to -1,500 for one policy);
on shared start states that spread leaves the difference, so this is what says whether a gap
in the levels is the policies' or the evaluations'. Plots of evaluations over updates
(seeds thin, mean thick) go to `--plots`.

Both libraries' TD3+BC start their layers from PyTorch's draw (ours: `model_config`'s
initializers at "torch_default", the default); `td3bc-pendulum-flax-init` runs both from
flax's (ours with the initializers at None, d3rlpy's layers redrawn by `_d3rlpy_worker.py
--init flax`), the diagnosis of the gap the draw made.

d3rlpy is never our dependency: it runs in the interpreter given by `--d3rlpy-python` (or
`$D3RLPY_PYTHON`, or this one when it can import d3rlpy), through `_d3rlpy_worker.py`:

    python -m venv /tmp/d3 && /tmp/d3/bin/pip install d3rlpy==2.8.1
    /tmp/d3/bin/pip install mujoco imageio     # the Hopper cases (checked before any run)
    python benchmarks/d3rlpy_compare.py --d3rlpy-python /tmp/d3/bin/python \\
        [--only iql-pendulum] [--seeds 0,1,2] [--updates 5000]

On a GPU ours runs on JAX's default backend (the GPU when JAX has its CUDA plugin) and
`--d3rlpy-device cuda:0` puts d3rlpy's on it too (each history names its device).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from typing import NamedTuple


from _offline_runs import (
    CACHE,
    D3RLPY_BATCH,
    check_d3rlpy_env,
    paired_difference,
    plot_runs,
    run_d3rlpy,
    run_ours,
    summary,
)

from rljax_offline import BCConfig, CQLConfig, IQLConfig
from rljax_offline.algorithms.actor_critic_base import D3RLPY_MODEL
from rljax_offline.algorithms.awac import AWACConfig
from rljax_offline.algorithms.bcq import BCQConfig
from rljax_offline.algorithms.bear import BEARConfig
from rljax_offline.algorithms.cal_ql import CalQLConfig
from rljax_offline.algorithms.crr import CRRConfig
from rljax_offline.algorithms.decision_transformer import (
    DecisionTransformerConfig,
    DiscreteDecisionTransformerConfig,
)
from rljax_offline.algorithms.discrete_bcq import DiscreteBCQConfig
from rljax_offline.algorithms.plas import PLASConfig
from rljax_offline.algorithms.rebrac import ReBRACConfig
from rljax_offline.algorithms.td3_bc import TD3BCConfig
from rljax_offline.apps import mujoco_datasets
from rljax_offline.apps.mujoco_record import make_dataset
from rljax_offline.apps.recipes import RECIPES, record_mixed
from rljax_offline.models.initializers import TORCH_DEFAULT

DEFAULT_BATCH = "each side's default"  # a plot's title where D3RLPY_BATCH has None
FIGURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "figures")


class Case(NamedTuple):
    recipe: str
    d3rlpy_algo: str
    ours: object  # an AlgorithmConfig at our defaults (plus the listed changes)
    updates: int
    d3rlpy_init: str = "torch"  # "flax": d3rlpy's layers drawn as flax's (a diagnosis)
    d3rlpy_overrides: dict | None = None  # the same change on d3rlpy's side as on ours
    d3rlpy_greedy: bool = False  # d3rlpy acts with its policy's mean (a diagnosis)


CASES = {
    "iql-pendulum": Case("pendulum-mixed", "IQL", IQLConfig(), 20000),
    "cql-cartpole": Case("cartpole-mixed", "DiscreteCQL", CQLConfig(), 20000),
    "td3bc-pendulum": Case("pendulum-mixed", "TD3PlusBC", TD3BCConfig(), 20000),
    # Both sides' layers drawn as flax draws them (TD3+BC's default is PyTorch's draw).
    "td3bc-pendulum-flax-init": Case(
        "pendulum-mixed", "TD3PlusBC",
        TD3BCConfig().rl_module(model_config={k: None for k in TORCH_DEFAULT}), 20000,
        d3rlpy_init="flax"),
    "cql-pendulum": Case("pendulum-mixed", "CQL", CQLConfig(), 6000),
    # Issue 38: an expert-heavy Pendulum mix (a quarter each: expert, expert + N(0, 0.5),
    # expert + N(0, 1.5), random), where both libraries get near the expert.
    "td3bc-pendulum-expert": Case("pendulum-expert-heavy", "TD3PlusBC", TD3BCConfig(), 20000),
    "iql-pendulum-expert": Case("pendulum-expert-heavy", "IQL", IQLConfig(), 20000),
    "bc-cartpole": Case("cartpole-mixed", "DiscreteBC", BCConfig(), 20000),
    "bc-pendulum": Case("pendulum-mixed", "BC", BCConfig(), 20000),
    "iql-cartpole": Case("cartpole-mixed", "IQL", IQLConfig(), 20000),
    # The algorithms zoo (docs/guides/algorithms-zoo.md): each at both libraries' defaults.
    "rebrac-pendulum": Case("pendulum-mixed", "ReBRAC", ReBRACConfig(), 20000),
    "awac-pendulum": Case("pendulum-mixed", "AWAC", AWACConfig(), 20000),
    # Ours with the tanh-squashed Gaussian actor SAC fine-tunes from, in place of d3rlpy's
    # (a Gaussian around tanh(mean), state-independent log-std in [-6, 0]; our default).
    "awac-pendulum-squashed": Case("pendulum-mixed", "AWAC",
                                   AWACConfig().training(actor_tanh_mean=False), 20000),
    "crr-pendulum": Case("pendulum-mixed", "CRR", CRRConfig(), 20000),
    # Both sides acting with the policy's mean in place of the critic-weighted resampling of
    # policy actions (the swap that explained the gap while ours acted only that way).
    "crr-pendulum-greedy": Case("pendulum-mixed", "CRR",
                                CRRConfig().training(action_selection="greedy"), 20000,
                                d3rlpy_greedy=True),
    "calql-pendulum": Case("pendulum-mixed", "CalQL", CalQLConfig(), 6000),
    "bcq-pendulum": Case("pendulum-mixed", "BCQ", BCQConfig(), 20000),
    # Ours with the paper's tanh-squashed decoder (d3rlpy 2.8's, our default, has no tanh).
    "bcq-tanh-decoder-pendulum": Case("pendulum-mixed", "BCQ",
                                      BCQConfig().training(squash_decoder=True), 20000),
    "discrete-bcq-cartpole": Case("cartpole-mixed", "DiscreteBCQ", DiscreteBCQConfig(), 20000),
    # PLAS's default warm-up (500,000 VAE updates) is longer than a run: 5,000 on both sides.
    "plas-pendulum": Case("pendulum-mixed", "PLAS", PLASConfig().training(warmup_steps=5000),
                          20000, d3rlpy_overrides={"warmup_steps": 5000}),
    # BEAR's default warm-up (40,000 MMD-only actor updates) is longer than a run: 5,000.
    "bear-pendulum": Case("pendulum-mixed", "BEAR", BEARConfig().training(warmup_steps=5000),
                          20000, d3rlpy_overrides={"warmup_steps": 5000}),
    # Ours with the MMD on the squashed actions in the unit box (the paper's) in place of
    # d3rlpy's pre-tanh draws (our default).
    "bear-pendulum-actions": Case("pendulum-mixed", "BEAR", BEARConfig().training(
        warmup_steps=5000, mmd_space="actions"), 20000, d3rlpy_overrides={"warmup_steps": 5000}),
    # Ours without the MMD term in the actor after the warm-up, as d3rlpy's acts in effect
    # (its update_alpha backpropagates -mmd_loss into the actor's gradient, which then
    # cancels the actor loss's +mmd_loss): the threshold out of reach, the multiplier at its
    # floor (e^-5) within about 500 updates.
    "bear-pendulum-mmd-off": Case("pendulum-mixed", "BEAR", BEARConfig().training(
        warmup_steps=5000, alpha_threshold=100.0, alpha_lr=1e-2), 20000,
        d3rlpy_overrides={"warmup_steps": 5000}),
    # Decision Transformer: the return to act towards has no default (the expert's level).
    "dt-pendulum": Case("pendulum-mixed", "DecisionTransformer",
                        DecisionTransformerConfig().training(target_return=-150.0), 20000),
    "discrete-dt-cartpole": Case("cartpole-mixed", "DiscreteDecisionTransformer",
                                 DiscreteDecisionTransformerConfig().training(
                                     target_return=500.0), 20000),
}

# A smaller Decision Transformer on both sides (one block, 128-wide embeddings), which a
# 2-core CPU trains 20,000 times in about 17 (ours) and 40 (d3rlpy) minutes: with the
# returns-to-go as they are (both libraries' default), then scaled by 0.001 (d3rlpy's
# reproduction scripts' reward scaler); the LayerNorm right after the embeddings takes the
# scale out of a return-to-go in the thousands. Both sides sample windows ending at any step
# (both defaults). `-aligned`: both sides on the fixed windows RLlib's time dim cuts (each
# episode in consecutive context_size pieces from its first step: ours with
# sample_unit="timesteps", d3rlpy's sampling the same pieces).
CASES["dt-pendulum-small"] = CASES["dt-pendulum"]._replace(
    ours=DecisionTransformerConfig().training(target_return=-150.0, num_layers=1).rl_module(
        model_config={**D3RLPY_MODEL, "fcnet_hiddens": [128]}),
    d3rlpy_overrides={"num_layers": 1, "encoder_hidden_units": [128]})
CASES["dt-pendulum-small-scaled"] = CASES["dt-pendulum-small"]._replace(
    ours=CASES["dt-pendulum-small"].ours.training(return_scale=0.001),
    d3rlpy_overrides={**CASES["dt-pendulum-small"].d3rlpy_overrides, "reward_scale": 0.001})
CASES["dt-pendulum-small-scaled-aligned"] = CASES["dt-pendulum-small-scaled"]._replace(
    ours=CASES["dt-pendulum-small-scaled"].ours.offline_data(sample_unit="timesteps"),
    d3rlpy_overrides={**CASES["dt-pendulum-small-scaled"].d3rlpy_overrides,
                      "aligned_windows": True})

# The zoo on the locally made Hopper sets (`rljax-offline datasets make NAME --env-steps
# 60000`, the sets of docs/benchmarks/parity-20k.md): every Box algorithm at both libraries'
# defaults, the same warm-up changes as on Pendulum; a Decision Transformer acts towards the
# set's expert return (`dataset.json`'s ref_max_score), filled in when the case runs.
HOPPER_ZOO = {short: CASES[f"{short}-pendulum"]
              for short in ("awac", "crr", "rebrac", "calql", "bcq", "plas", "bear")}
HOPPER_ZOO["dt"] = CASES["dt-pendulum"]._replace(ours=DecisionTransformerConfig())
# CRR with d3rlpy's actor (a Gaussian around tanh(mean), its log-std a network output).
HOPPER_ZOO["crr-tanh-mean"] = CASES["crr-pendulum"]._replace(
    ours=CRRConfig().training(actor_tanh_mean=True))
# AWAC with d3rlpy's TD target (a' from the squashed Gaussian, minus its log-density).
HOPPER_ZOO["awac-d3rlpy-target"] = CASES["awac-pendulum"]._replace(
    ours=AWACConfig().training(d3rlpy_target=True))
# Cal-QL with d3rlpy's TD target (Q' at the policy's mean action at s', not a draw) and its
# multiplier's learning rate (1e-4, ours critic_lr's 3e-4).
HOPPER_ZOO["calql-d3rlpy-backup"] = CASES["calql-pendulum"]._replace(
    ours=CalQLConfig().training(mean_action_backup=True, alpha_prime_lr=1e-4))
# Cal-QL with PyTorch's initial draw of every layer, as d3rlpy's (ours: RLlib's CQL's, flax's).
HOPPER_ZOO["calql-torch-init"] = CASES["calql-pendulum"]._replace(
    ours=CalQLConfig().rl_module(model_config=D3RLPY_MODEL))
# BEAR without the MMD term in the actor after the warm-up (d3rlpy's in effect), as on Pendulum.
HOPPER_ZOO["bear-mmd-off"] = CASES["bear-pendulum-mmd-off"]
# ReBRAC with ten times d3rlpy's actor penalty (`actor_beta=0.01`): whether the default's weak
# pull towards the data's actions is what lets a run leave the data and fall on narrow sets.
HOPPER_ZOO["rebrac-actor-beta-0.01"] = CASES["rebrac-pendulum"]._replace(
    ours=ReBRACConfig().training(actor_beta=0.01))
# The same penalty on both sides: whether d3rlpy's runs hold with it too.
HOPPER_ZOO["rebrac-both-actor-beta-0.01"] = HOPPER_ZOO["rebrac-actor-beta-0.01"]._replace(
    d3rlpy_overrides={"actor_beta": 0.01})
HOPPER_ZOO["bcq-tanh-decoder"] = CASES["bcq-tanh-decoder-pendulum"]
# The one-block, 128-wide Decision Transformer a CPU trains (the default is hours a run), the
# returns-to-go scaled by 0.01 on both sides: these sets' returns (expert 523) are about ten
# times smaller than D4RL's Hopper, which d3rlpy's reproduction scripts scale by 0.001.
HOPPER_ZOO["dt-small-scaled"] = CASES["dt-pendulum-small"]._replace(
    ours=CASES["dt-pendulum-small"].ours.training(target_return=None, return_scale=0.01),
    d3rlpy_overrides={**CASES["dt-pendulum-small"].d3rlpy_overrides, "reward_scale": 0.01})
for _data in ("hopper-medium", "hopper-medium-replay"):
    for _short, _case in HOPPER_ZOO.items():
        CASES[f"{_short}-{_data}"] = _case._replace(recipe=_data)
MUJOCO_ENV_STEPS = 60_000  # the SAC run the Hopper sets are made from (when missing)


def case_env_id(recipe: str) -> str:
    """The env a recipe's episodes come from and its policies are evaluated in."""
    if recipe in mujoco_datasets.RECIPES:
        return mujoco_datasets.RECIPES[recipe].env_id
    return RECIPES[recipe].env_id


def recording(recipe: str, data_root: str) -> tuple[str, str]:
    """The folder of `recipe`'s episodes (recorded or made first when missing) and its env:
    a mixed set (`apps.recipes`) under the bench cache, a MuJoCo set under `data_root`."""
    if recipe in mujoco_datasets.RECIPES:
        path = os.path.join(data_root, recipe)
        if not os.path.isfile(os.path.join(path, mujoco_datasets.META_FILE)):
            make_dataset(recipe, path, env_steps=MUJOCO_ENV_STEPS, log=print)
    else:
        path = os.path.join(CACHE, recipe)
        if not os.path.isdir(path):
            record_mixed(recipe, path)
    return path, case_env_id(recipe)


def for_data(ours, data: str):
    """`ours` with a Decision Transformer's missing target return set to the MuJoCo set's
    expert return (its `dataset.json`); any other config as it is."""
    if getattr(ours, "target_return", 0.0) is not None:
        return ours
    return ours.training(target_return=float(mujoco_datasets.read_meta(data)["ref_max_score"]))


def d3rlpy_python(given: str | None) -> str | None:
    if given:
        return given
    if os.environ.get("D3RLPY_PYTHON"):
        return os.environ["D3RLPY_PYTHON"]
    return sys.executable if importlib.util.find_spec("d3rlpy") is not None else None


def saved(runs: str | None, key: str, make, reuse: bool = True) -> dict | None:
    """With `make` None (`--sides saved`): the saved history or None, nothing run."""
    if make is None:
        path = os.path.join(runs or "", f"{key}.json")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return {**json.load(f), "reused": path}
    return kept(runs, key, make, reuse)


def kept(runs: str | None, key: str, make, reuse: bool = True) -> dict:
    """`make()`'s history, saved as `runs/key.json`; with `runs` given, `reuse` and that file
    there, the saved one (d3rlpy's runs do not change when ours does: `--runs` reuses them;
    ours only with `--reuse-ours`, to tabulate runs made earlier with the same code)."""
    path = os.path.join(runs, f"{key}.json") if runs else None
    if reuse and path and os.path.exists(path):
        with open(path) as f:
            return {**json.load(f), "reused": path}
    history = make()
    if path:
        os.makedirs(runs, exist_ok=True)
        with open(path, "w") as f:
            json.dump(history, f)
    return history


def d3rlpy_side(case: Case) -> tuple:
    """Everything d3rlpy's run of a case depends on besides seed, updates and evaluations."""
    return (case.recipe, case.d3rlpy_algo, case.d3rlpy_init,
            json.dumps(case.d3rlpy_overrides, sort_keys=True), case.d3rlpy_greedy,
            getattr(case.ours, "target_return", None))


def d3rlpy_run_name(name: str) -> str:
    """The case whose name d3rlpy's saved runs for `name` carry: the first case with the same
    d3rlpy side. A swap that changes only ours (`awac-d3rlpy-target-*`) thus reuses its base
    case's d3rlpy runs instead of training d3rlpy again under a new name."""
    side = d3rlpy_side(CASES[name])
    return next(other for other, case in CASES.items() if d3rlpy_side(case) == side)


def figure_name(name: str, updates: int) -> str:
    """A case's PNG: `NAME.png` at its own update count, `NAME-uUPDATES.png` at another
    (`--updates`), so a longer run's figure does not replace the case's own."""
    return f"{name}.png" if updates == CASES[name].updates else f"{name}-u{updates}.png"


def run_case(name: str, python: str, seeds: list[int], updates: int | None, evals: int,
             eval_episodes: int, plots: str | None, runs: str | None = None,
             sides: str = "both", reuse_ours: bool = False,
             d3rlpy_seeds: list[int] | None = None, threads: int = 1,
             final_episodes: int = 100, data_root: str = "",
             d3rlpy_device: str = "cpu:0") -> dict | None:
    case = CASES[name]
    n = updates or case.updates
    data, env_id = recording(case.recipe, data_root)
    ours_config = for_data(case.ours, data)
    batch = D3RLPY_BATCH[case.d3rlpy_algo]
    ours, theirs = [], []
    d3rlpy_seeds = seeds if d3rlpy_seeds is None else d3rlpy_seeds
    only_saved = sides == "saved"
    for seed in sorted(set(seeds) | set(d3rlpy_seeds)):
        if sides in ("both", "ours", "saved") and seed in seeds:
            h = saved(runs, f"ours-{name}-s{seed}-u{n}-e{evals}x{eval_episodes}",
                      None if only_saved else lambda seed=seed: run_ours(
                          data, env_id, ours_config, n, seed, evals=evals,
                          eval_episodes=eval_episodes, batch_size=batch,
                          final_episodes=final_episodes), reuse=reuse_ours)
            ours += [h] if h else []
            print(json.dumps({"case": name, **(h or {"missing": f"ours seed {seed}"})}),
                  flush=True)
        if sides in ("both", "d3rlpy", "saved") and seed in d3rlpy_seeds:
            key = f"d3rlpy-{d3rlpy_run_name(name)}-s{seed}-u{n}-e{evals}x{eval_episodes}"
            h = saved(runs, key,
                      None if only_saved else lambda seed=seed: run_d3rlpy(
                          python, data, env_id, case.d3rlpy_algo, n, seed, evals=evals,
                          eval_episodes=eval_episodes, batch_size=batch, threads=threads,
                          final_episodes=final_episodes, init=case.d3rlpy_init,
                          overrides=case.d3rlpy_overrides,
                          target_return=getattr(ours_config, "target_return", None),
                          greedy=case.d3rlpy_greedy, device=d3rlpy_device))
            theirs += [h] if h else []
            print(json.dumps({"case": name, **(h or {"missing": f"d3rlpy seed {seed}"})}),
                  flush=True)
    if sides not in ("both", "saved"):
        return None
    if plots and (ours or theirs):
        runs_by_label = {f"ours ({ours_config.algo_name})": ours,
                         f"d3rlpy {case.d3rlpy_algo}": theirs}
        plot_runs({k: v for k, v in runs_by_label.items() if v},
                  os.path.join(plots, figure_name(name, n)),
                  title=f"{name}: {case.recipe}, batch {batch or DEFAULT_BATCH}")
    if not ours or not theirs:
        return None
    row = {"case": name, "d3rlpy_algo": case.d3rlpy_algo, "batch_size": batch,
           "ours": summary(ours), "d3rlpy": summary(theirs)}
    row["x_d3rlpy"] = row["ours"]["updates_per_s"] / row["d3rlpy"]["updates_per_s"]
    row.update(paired_difference(ours, theirs))
    print(json.dumps({"summary": row}), flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="iql-pendulum,cql-cartpole,td3bc-pendulum,cql-pendulum,"
                    "bc-cartpole", help=f"comma-separated cases of {sorted(CASES)}")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    ap.add_argument("--d3rlpy-seeds", help="d3rlpy's seeds when fewer fit (default: --seeds)")
    ap.add_argument("--updates", type=int, help="updates of every case (default: its own)")
    ap.add_argument("--evals", type=int, default=10, help="evaluations per run")
    ap.add_argument("--eval-episodes", type=int, default=10)
    ap.add_argument("--final-episodes", type=int, default=100,
                    help="the final policies' paired evaluation (0: none)")
    ap.add_argument("--plots", default=FIGURES, help="folder for the PNGs ('' for none)")
    ap.add_argument("--d3rlpy-python", help="interpreter with d3rlpy 2.8 installed")
    ap.add_argument("--d3rlpy-threads", type=int, default=1,
                    help="torch's threads in d3rlpy's interpreter (0: torch's default, which "
                         "oversubscribes a shared 2-core CPU)")
    ap.add_argument("--d3rlpy-device", default="cpu:0",
                    help="torch's device for d3rlpy (cuda:0 on a GPU; ours runs on JAX's "
                         "default backend)")
    ap.add_argument("--runs", help="folder where d3rlpy's histories are saved and reused "
                    "(same d3rlpy side, seed, updates and evaluations: a case that changes "
                    "only ours reuses its base case's)")
    ap.add_argument("--data-root", default=os.path.join(CACHE, "mujoco"),
                    help="where the Hopper sets of the *-hopper-* cases are (made when missing)")
    ap.add_argument("--sides", default="both", choices=("both", "ours", "d3rlpy", "saved"),
                    help="run one library only (no table): e.g. fill --runs with d3rlpy's; "
                    "saved: run nothing, tabulate the histories saved in --runs")
    ap.add_argument("--reuse-ours", action="store_true",
                    help="also reuse our histories saved in --runs (a table of earlier runs)")
    args = ap.parse_args()
    python = d3rlpy_python(args.d3rlpy_python)
    if python is None and args.sides in ("both", "d3rlpy"):
        sys.exit("d3rlpy is not importable here: pass --d3rlpy-python (see the docstring)")
    names = args.only.split(",")
    unknown = [name for name in names if name not in CASES]
    if unknown:
        sys.exit(f"--only: unknown case(s) {unknown}; the cases are {', '.join(CASES)}")
    if args.sides in ("both", "d3rlpy"):
        for env_id in sorted({case_env_id(CASES[name].recipe) for name in names}):
            check_d3rlpy_env(python, env_id)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = [run_case(name, python, seeds, args.updates, args.evals, args.eval_episodes,
                     args.plots or None, args.runs, args.sides, args.reuse_ours,
                     [int(s) for s in args.d3rlpy_seeds.split(",")] if args.d3rlpy_seeds
                     else None, args.d3rlpy_threads, args.final_episodes, args.data_root,
                     args.d3rlpy_device)
            for name in names]
    rows = [r for r in rows if r is not None]
    print_tables(rows)


# One summary row's figures, in the order both tables print them.
ROW_FORMATS = (
    "{:15} {:7d} {:3d}/{:<3d} {:8.1f} +- {:5.1f} {:8.1f} +- {:5.1f} {:9.1f} {:8.1f} {:7.1f} "
    "{:8.1f} {:5.1f}x",
    "| {} | {:,} | {} / {} | {:.1f} +- {:.1f} | {:.1f} +- {:.1f} | {:.1f} / {:.1f} | "
    "{:.1f} / {:.1f} | {:.1f}x |")


def row_figures(r: dict) -> tuple:
    o, d = r["ours"], r["d3rlpy"]
    return (r["case"], o["updates"], len(o["seeds"]), len(d["seeds"]), o["level_mean"],
            o["level_std"], d["level_mean"], d["level_std"], o["best"], d["best"],
            o["updates_per_s"], d["updates_per_s"], r["x_d3rlpy"])


def print_tables(rows: list[dict]) -> None:
    """The summary rows as a fixed-width table, then as Markdown (the table of
    docs/benchmarks/d3rlpy-parity.md)."""
    fixed, markdown = ROW_FORMATS
    print(f"\n{'case':15} {'updates':>7} {'seeds':>7} {'ours level':>16} "
          f"{'d3rlpy level':>16} {'ours best':>9} {'d3 best':>8} {'ours/s':>7} "
          f"{'d3rlpy/s':>8} {'ratio':>6}")
    for r in rows:
        print(fixed.format(*row_figures(r)))
    print("\n| case | updates | seeds ours / d3rlpy | level ours | level d3rlpy | best ours / "
          "d3rlpy | updates/s ours / d3rlpy | ratio |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(markdown.format(*row_figures(r)))
    paired = [r for r in rows if "final_diff" in r]
    if paired:
        print("\n| case | final episodes x seeds | final ours | final d3rlpy | ours - d3rlpy "
              "(paired, +- s.e.) |\n|---|---|---|---|---|")
        for r in paired:
            o, d = r["ours"], r["d3rlpy"]
            print(f"| {r['case']} | {r['final_episodes']} x {len(o['seeds'])} / "
                  f"{len(d['seeds'])} | {o['final_mean']:.1f} | {d['final_mean']:.1f} | "
                  f"{r['final_diff']:+.1f} +- {r['final_diff_se']:.1f} |")


if __name__ == "__main__":
    main()
