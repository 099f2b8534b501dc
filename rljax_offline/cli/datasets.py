"""`rljax-offline datasets`: the data sets made here (`list`, `make`): D4RL-style MuJoCo sets
(`apps.mujoco_datasets`) and multi-agent mpe2 sets from scripted policies
(`apps.multi_agent_datasets`)."""

from __future__ import annotations

import sys

from rljax_offline.apps import multi_agent_datasets as ma
from rljax_offline.apps.mujoco_datasets import (
    DEFAULT_ENV_STEPS,
    DEFAULT_NUM_STEPS,
    ENVS,
    KINDS,
    RECIPES,
)
from rljax_offline.cli.args import non_negative_int, positive_int
from rljax_offline.cli.output import Parser, add_command, emit
from rljax_offline.errors import UsageError

_RL_RUN_ONLY = ("env_steps", "cache_dir")


def run_list(args) -> int:
    del args
    for r in RECIPES.values():
        emit({"dataset": r.name, "env_id": r.env_id, "kind": r.kind, "behavior": r.doc})
    for r in ma.RECIPES.values():
        emit({"dataset": r.name, "env_id": r.spec.env_id, "kind": r.kind,
              "epsilon": r.epsilon, "multi_agent": True, "behavior": r.doc})
    return 0


def _make_multi_agent(args, log) -> dict:
    # start-up: as for MuJoCo below, the recorder loads JAX and the env runner
    from rljax_offline.apps.multi_agent_record import make_multi_agent_dataset

    given = [f"--{k.replace('_', '-')}" for k in _RL_RUN_ONLY if getattr(args, k) is not None]
    if given and ma.RECIPES[args.name].kind == "heuristic":
        raise UsageError(f"{', '.join(given)}: MuJoCo and IPPO data sets only ({args.name} "
                         "is made from a scripted policy, no RL run)")
    return make_multi_agent_dataset(
        args.name, args.output, num_steps=args.num_steps or ma.DEFAULT_NUM_STEPS,
        seed=args.seed, num_envs=args.num_envs,
        eval_episodes=args.eval_episodes or ma.DEFAULT_EVAL_EPISODES,
        env_steps=args.env_steps, cache_dir=args.cache_dir, progress=not args.quiet, log=log)


def run_make(args) -> int:
    log = None if args.quiet else (lambda message: print(message, file=sys.stderr, flush=True))
    if args.name in ma.RECIPES:
        meta = _make_multi_agent(args, log)
        keys = ("name", "env_id", "kind", "epsilon", "num_episodes", "num_steps",
                "num_agent_steps", "agent_to_module", "return_mean", "return_std",
                "ref_min_score", "ref_max_score", "normalized_return_mean")
        emit({"command": "datasets make", "output": args.output, **{k: meta[k] for k in keys}})
        return 0
    # start-up: apps.mujoco_record loads the algorithms, SAC and the env runner (~1 s with
    # mujoco); `datasets list` and `--help` need none of it (measured 2026-11-24).
    from rljax_offline.apps.mujoco_record import make_dataset

    meta = make_dataset(args.name, args.output, num_steps=args.num_steps or DEFAULT_NUM_STEPS,
                        env_steps=args.env_steps or DEFAULT_ENV_STEPS, seed=args.seed,
                        cache_dir=args.cache_dir, eval_episodes=args.eval_episodes or 10,
                        num_envs=args.num_envs, log=log)
    emit({"command": "datasets make", "output": args.output,
          **{k: meta[k] for k in ("name", "env_id", "kind", "num_episodes", "num_steps",
                                  "return_mean", "ref_min_score", "ref_max_score", "notes")},
          "normalized_return_mean": meta.get("normalized_return_mean")})
    return 0


def register(sub) -> None:
    """Adds `datasets` and its subcommands `list` and `make` to the subcommands `sub`."""
    kinds = ", ".join(KINDS)
    p = add_command(
        sub, "datasets", "data sets made here: D4RL-style MuJoCo (Hopper, HalfCheetah, "
        "Walker2d; kinds " + kinds + ") and multi-agent mpe2 (scripted heuristics, "
        "epsilon ladders)",
        "  rljax-offline datasets list\n"
        "  rljax-offline datasets make hopper-medium --output data/hopper-medium\n"
        "  rljax-offline datasets make walker2d-expert --output data/w --env-steps 200000 "
        "--num-steps 200000\n"
        "  rljax-offline datasets make mpe-simple_spread-heuristic-eps0.3 --output data/s03",
        None)  # the subcommand's own run is set by list or make
    inner = p.add_subparsers(dest="datasets_command", required=True, metavar="SUBCOMMAND",
                             parser_class=Parser, help="list or make")
    add_command(inner, "list", "the data sets `make` knows, one JSON line each",
                "  rljax-offline datasets list", run_list)
    m = add_command(
        inner, "make", "record the data set (MuJoCo: from the env's SAC run, trained or taken "
        "from the cache; mpe2: from the scripted policy or the IPPO run) and write dataset.json "
        "beside its Parquet files",
        "  rljax-offline datasets make hopper-medium --output data/hopper-medium\n"
        "  rljax-offline datasets make hopper-medium-replay --output data/hmr --env-steps 100000\n"
        "  rljax-offline datasets make mpe-simple_spread-heuristic-eps0.1 --output data/s01 "
        "--num-steps 250000",
        run_make)
    m.add_argument("name", choices=sorted(RECIPES) + sorted(ma.RECIPES), metavar="NAME",
                   help=f"ENV-KIND, ENV one of {', '.join(ENVS)}, KIND one of {kinds}; or "
                        "an mpe2 set, mpe-ENV-heuristic-epsE or mpe-ENV-ippo-KIND "
                        "(`datasets list` names them)")
    m.add_argument("--output", required=True, help="a new (or empty) folder to write into")
    m.add_argument("--num-steps", type=positive_int, default=None,
                   help=f"size in env steps, whole episodes (default {DEFAULT_NUM_STEPS:,} for "
                        f"MuJoCo, {ma.DEFAULT_NUM_STEPS:,} for mpe2; MuJoCo medium-replay: the "
                        "learner's steps up to the medium checkpoint instead)")
    m.add_argument("--env-steps", type=positive_int, default=None,
                   help=f"MuJoCo: env steps of the SAC run behind the behaviour policies "
                        f"(default {DEFAULT_ENV_STEPS:,}, far short of D4RL's 1M: the expert "
                        f"is weaker); mpe2 IPPO sets: of the IPPO run (default "
                        f"{ma.DEFAULT_IPPO_ENV_STEPS:,})")
    m.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of the SAC run and of the recordings (mpe2: the env seeds and "
                        "the behaviour's draws)")
    m.add_argument("--cache-dir", default=None,
                   help="where the SAC (MuJoCo) or IPPO (mpe2) runs are kept (default "
                        "$RLJAX_MUJOCO_CACHE / $RLJAX_MULTI_AGENT_CACHE, else ~/.cache/...)")
    m.add_argument("--eval-episodes", type=positive_int, default=None,
                   help="episodes behind the normalization constants, the random and expert "
                        f"(mpe2: heuristic, or IPPO's expert) mean returns (default 10 for MuJoCo, "
                        f"{ma.DEFAULT_EVAL_EPISODES} for mpe2)")
    m.add_argument("--num-envs", type=positive_int, default=8,
                   help="vectorised env copies stepped together while recording")
    m.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
