"""`rljax-offline datasets`: the D4RL-style MuJoCo data sets made here (`list`, `make`)."""

from __future__ import annotations

import sys

from rljax_offline.apps.mujoco_datasets import (
    DEFAULT_ENV_STEPS,
    DEFAULT_NUM_STEPS,
    ENVS,
    KINDS,
    RECIPES,
)
from rljax_offline.cli.args import non_negative_int, positive_int
from rljax_offline.cli.output import Parser, add_command, emit


def run_list(args) -> int:
    del args
    for r in RECIPES.values():
        emit({"dataset": r.name, "env_id": r.env_id, "kind": r.kind, "behavior": r.doc})
    return 0


def run_make(args) -> int:
    # start-up: apps.mujoco_record loads the algorithms, SAC and the env runner (~1 s with
    # mujoco); `datasets list` and `--help` need none of it (measured 2026-11-24).
    from rljax_offline.apps.mujoco_record import make_dataset

    log = None if args.quiet else (lambda message: print(message, file=sys.stderr, flush=True))
    meta = make_dataset(args.name, args.output, num_steps=args.num_steps,
                        env_steps=args.env_steps, seed=args.seed, cache_dir=args.cache_dir,
                        eval_episodes=args.eval_episodes, num_envs=args.num_envs, log=log)
    emit({"command": "datasets make", "output": args.output,
          **{k: meta[k] for k in ("name", "env_id", "kind", "num_episodes", "num_steps",
                                  "return_mean", "ref_min_score", "ref_max_score", "notes")},
          "normalized_return_mean": meta.get("normalized_return_mean")})
    return 0


def register(sub) -> None:
    """Adds `datasets` and its subcommands `list` and `make` to the subcommands `sub`."""
    kinds = ", ".join(KINDS)
    p = add_command(
        sub, "datasets", "D4RL-style MuJoCo data sets made here (Hopper, HalfCheetah, "
        "Walker2d; kinds " + kinds + ")",
        "  rljax-offline datasets list\n"
        "  rljax-offline datasets make hopper-medium --output data/hopper-medium\n"
        "  rljax-offline datasets make walker2d-expert --output data/w --env-steps 200000 "
        "--num-steps 200000", None)  # the subcommand's own run is set by list or make
    inner = p.add_subparsers(dest="datasets_command", required=True, metavar="SUBCOMMAND",
                             parser_class=Parser, help="list or make")
    add_command(inner, "list", "the data sets `make` knows, one JSON line each",
                "  rljax-offline datasets list", run_list)
    m = add_command(
        inner, "make", "train (or take from the cache) the env's SAC run, record the data set "
        "and write dataset.json beside its Parquet files",
        "  rljax-offline datasets make hopper-medium --output data/hopper-medium\n"
        "  rljax-offline datasets make hopper-medium-replay --output data/hmr --env-steps 100000",
        run_make)
    m.add_argument("name", choices=sorted(RECIPES), metavar="NAME",
                   help=f"ENV-KIND, ENV one of {', '.join(ENVS)}, KIND one of {kinds}")
    m.add_argument("--output", required=True, help="a new (or empty) folder to write into")
    m.add_argument("--num-steps", type=positive_int, default=DEFAULT_NUM_STEPS,
                   help="size in env steps, whole episodes (medium-replay: the learner's steps "
                        "up to the medium checkpoint instead)")
    m.add_argument("--env-steps", type=positive_int, default=DEFAULT_ENV_STEPS,
                   help="env steps of the SAC run behind the behaviour policies (the CPU "
                        "default is far short of D4RL's 1M: the expert is weaker)")
    m.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of the SAC run and of the recordings")
    m.add_argument("--cache-dir", default=None,
                   help="where SAC runs are kept (default $RLJAX_MUJOCO_CACHE or "
                        "~/.cache/rljax_offline/mujoco)")
    m.add_argument("--eval-episodes", type=positive_int, default=10,
                   help="episodes behind the normalization constants (random and expert "
                        "mean returns)")
    m.add_argument("--num-envs", type=positive_int, default=8,
                   help="vectorised env copies stepped together while recording")
    m.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
