"""`rljax-offline evaluate`: a checkpoint's greedy policy in its env, or, with `--offline`,
off-policy estimates of one or more checkpoints' values from offline data alone
(`rljax_offline.ope`): a table of estimates with 95% intervals, optionally the env's
discounted return beside them (`--env`) and a plot (`--plot`)."""

from __future__ import annotations

import os

from rljax_offline.apps.plotting import save_ope_estimates
from rljax_offline.apps.reporting import default_logger
from rljax_offline.cli.args import input_of, positive_int, probability_arg
from rljax_offline.cli.output import add_command, emit
from rljax_offline.errors import UsageError

OPE_METHODS = "is,wis,pdis,wpdis,fqe,dr"


def _env_value(policy, env: str, gamma: float, episodes: int, seed: int) -> float:
    """Mean discounted return of the policy OPE evaluated (its action distribution)."""
    # start-up: ope.env_value (with acting.env_runner) costs ~120 ms on top of
    # `import rljax_offline.cli` (measured 2026-11-24, loaded machine); only --env needs it
    from rljax_offline.acting.actor import actor_for
    from rljax_offline.ope.env_value import discounted_env_value

    return discounted_env_value(actor_for(policy, explore=True), env, gamma, episodes, seed,
                                num_envs=8)[0]


def _table(rows: list[dict], methods: list[str]) -> str:
    head = f"{'checkpoint':<28}{'env return':>12}" + "".join(
        f"{m:>30}" for m in methods)
    lines = [head]
    for r in rows:
        true = "" if r["true"] is None else f"{r['true']:.2f}"
        cells = "".join(
            f"{e['v_target']:>10.2f} [{e['v_target_ci'][0]:7.2f},{e['v_target_ci'][1]:7.2f}]"
            for e in (r["estimates"][m] for m in methods))
        lines.append(f"{r['label'][-28:]:<28}{true:>12}{cells}")
    ess = ", ".join(f"{os.path.basename(r['label'])}: {r['ess']:.1f}" for r in rows
                    if r["ess"] is not None)
    if ess:
        lines.append(f"effective sample size of the importance weights ({rows[0]['n']} "
                     f"episodes): {ess}")
    return "\n".join(lines)


def run_offline(args) -> int:
    # start-up: ope.api costs ~340 ms on top of `import rljax_offline.cli` (measured
    # 2026-11-24 with the facade, loaded machine); only --offline needs it
    from rljax_offline.learning.trained_policy import load_policy
    from rljax_offline.ope.api import estimate, load_episodes

    if not args.input:
        raise UsageError("evaluate --offline needs --input DATA (the offline data)")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    episodes = load_episodes(input_of(args), input_read_episodes=not args.tabular)
    rows = []
    for ckpt in args.checkpoint:
        policy = load_policy(ckpt)  # no algorithm built: its trained policy only
        gamma = policy.gamma if args.gamma is None else args.gamma
        fqe = {"num_updates": args.fqe_updates, "bootstrap_heads": args.fqe_heads}
        est = estimate(policy, episodes, methods=methods, gamma=gamma,
                       explore=not args.greedy, fqe=fqe, num_bootstrap=args.bootstrap)
        true = (_env_value(policy, args.env, gamma, args.episodes, policy.seed + 10_000)
                if args.env else None)
        weighted = [e["ess"] for e in est.values() if e.get("ess") is not None]
        rows.append({"label": ckpt, "estimates": est, "true": true,
                     "ess": weighted[0] if weighted else None,
                     "n": next(iter(est.values()))["num_episodes"]})
        if args.json:
            emit({"command": "evaluate", "offline": True, "checkpoint": ckpt, "gamma": gamma,
                  "env_return": true, "off_policy_estimator": est})
    if not args.json:
        print(_table(rows, methods), flush=True)
    if args.plot:
        save_ope_estimates([{**r, "label": os.path.basename(os.path.normpath(r["label"]))}
                            for r in rows], args.plot)
    return 0


def run(args) -> int:
    if args.offline:
        return run_offline(args)
    if len(args.checkpoint) != 1:
        raise UsageError("evaluate takes one --checkpoint in the env (several with --offline)")
    # start-up: algorithms.algorithm (the facade) costs ~120 ms on top of
    # `import rljax_offline.cli`; only `evaluate` needs it here (measured 2026-11-24).
    from rljax_offline.algorithms.algorithm import Algorithm

    algo = Algorithm.from_checkpoint(args.checkpoint[0])
    result = algo.evaluate(num_episodes=args.episodes)
    if args.log_dir:
        with default_logger(args.log_dir, tensorboard=not args.no_tensorboard) as log:
            log.log({"evaluation": {"env_runners": result}}, step=algo.iteration)
    emit({"command": "evaluate", "checkpoint": args.checkpoint[0], **result})
    return 0


def register(sub) -> None:
    """Adds `evaluate` and its flags to the subcommands `sub`."""
    p = add_command(
        sub, "evaluate", "run a checkpoint's greedy policy in its env, or estimate "
        "checkpoints' values from offline data (--offline)",
        "  rljax-offline evaluate --checkpoint runs/bc/checkpoint --episodes 20\n"
        "  rljax-offline evaluate --offline --input data/cartpole_mixed "
        "--checkpoint runs/bc/checkpoint \\\n"
        "      --checkpoint runs/cql/checkpoint --methods wis,fqe,dr --plot ope.png",
        run)
    p.add_argument("--checkpoint", required=True, action="append",
                   help="checkpoint folder written by train (repeat with --offline)")
    p.add_argument("--episodes", type=positive_int, default=10, help="episodes to run")
    p.add_argument("--log-dir", default=None,
                   help="also log the results (metrics.jsonl and TensorBoard events, at the "
                        "checkpoint's iteration) into this folder, e.g. the run's --out")
    p.add_argument("--no-tensorboard", action="store_true",
                   help="with --log-dir: JSON lines only")
    g = p.add_argument_group("off-policy evaluation (--offline)")
    g.add_argument("--offline", action="store_true",
                   help="estimate each checkpoint's value from --input's episodes "
                        "(rljax_offline.ope) instead of running it in the env")
    g.add_argument("--input", nargs="+", default=None, metavar="DATA",
                   help="offline data: Parquet files, folders or globs")
    g.add_argument("--tabular", action="store_true",
                   help="the input is in tabular rows, not episode rows")
    g.add_argument("--methods", default=OPE_METHODS,
                   help="estimators, comma-separated: is, wis, pdis, wpdis, fqe, dr")
    g.add_argument("--gamma", type=probability_arg, default=None,
                   help="discount of the estimates (default: the checkpoint's gamma)")
    g.add_argument("--fqe-updates", type=positive_int, default=5000,
                   help="updates of the fitted Q evaluation behind fqe and dr")
    g.add_argument("--fqe-heads", type=positive_int, default=1,
                   help="bootstrap heads of that Q model: their spread widens the fqe and dr "
                        "intervals by the model's error (5 heads take about 5x the time)")
    g.add_argument("--bootstrap", type=positive_int, default=200,
                   help="bootstrap resamples of the episodes for the 95%% intervals")
    g.add_argument("--greedy", action="store_true",
                   help="evaluate the greedy policy, not the policy's action distribution")
    g.add_argument("--env", default=None,
                   help="also run each policy for --episodes episodes in this env and show "
                        "its discounted return beside the estimates")
    g.add_argument("--plot", default=None, metavar="PNG",
                   help="write the estimates with their intervals (and env returns) here")
    g.add_argument("--json", action="store_true",
                   help="one JSON line per checkpoint instead of the table")
