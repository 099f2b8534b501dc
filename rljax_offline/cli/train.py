"""`rljax-offline train`: an algorithm of the registry, from offline data or online in --env.

The `--algo` choices, the command's help and `train --algo NAME`'s own flags (one per option
the algorithm's config adds to `AlgorithmConfig.training`) all come from
`rljax_offline.registry`: a registered algorithm is on the command line with no
change here.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from rljax_offline import registry
from rljax_offline.acting.multi_agent_runner import probe_agent_spaces
from rljax_offline.algorithms.config import AlgorithmConfig
from rljax_offline.apps.reporting import default_logger
from rljax_offline.apps.training_loop import run_training
from rljax_offline.cli.args import (
    add_read_options,
    batch_size,
    device_count,
    env_id,
    finite_float,
    input_of,
    model_config,
    non_negative_int,
    parse_bool,
    positive_float,
    positive_int,
    read_kwargs,
)
from rljax_offline.cli.output import add_command, emit
from rljax_offline.envs.make import multi_agent_env_factory
from rljax_offline.errors import UsageError

DEFAULT_ALGO = "bc"  # `train` without --algo


def algo_of(argv: list[str]) -> str:
    """The `--algo` value of a `train` command line (before the full parse), default bc."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--algo", default=DEFAULT_ALGO)
    algo = pre.parse_known_args(argv)[0].algo
    return algo if algo in registry.names() else DEFAULT_ALGO  # unknown: the full parse fails


def config_from_args(args) -> AlgorithmConfig:
    """The algorithm's config from the parsed flags; flags left out keep its defaults."""
    cls = registry.config_class(args.algo)
    if cls.trains_online and args.input:
        raise UsageError(f"--algo {args.algo} trains online in --env from its own rollouts; "
                         "--input is for the offline algorithms")
    if not cls.trains_online and not args.input:
        raise UsageError(f"--algo {args.algo} trains from offline data: give --input")
    training = {k[len("algo__"):]: v for k, v in vars(args).items() if k.startswith("algo__")}
    given = {"lr": args.lr, "train_batch_size_per_learner": args.batch_size,
             "num_updates_per_iteration": args.updates_per_iteration}
    training.update({k: v for k, v in given.items() if v is not None})
    offline = {} if cls.trains_online else dict(input_=input_of(args), **read_kwargs(args))
    if args.shuffle_buffer_size is not None and not args.stream:
        raise UsageError("--shuffle-buffer-size is for streamed data: add --stream")
    if args.stream:
        if cls.trains_online:
            raise UsageError(f"--stream is for offline data; --algo {args.algo} trains online")
        offline.update(materialize_data=False, materialize_mapped_data=False)
        if args.shuffle_buffer_size is not None:
            offline["shuffle_buffer_size"] = args.shuffle_buffer_size
    config = cls()
    if args.multi_agent is not None:
        config = _multi_agent(config, args)
    return (config
            .environment(args.env)
            .offline_data(**offline)
            .training(**training)
            .learners(num_devices=args.num_devices, **_distributed_kwargs(args))
            .evaluation(evaluation_interval=args.eval_interval,
                        evaluation_duration=args.eval_episodes)
            .rl_module(model_config={"fcnet_hiddens": args.hiddens, **args.model_config})
            .debugging(seed=args.seed))


def _multi_agent(config: AlgorithmConfig, args) -> AlgorithmConfig:
    """`--multi-agent shared`: every agent of --env trains one module; `per-agent`: a module
    each (their ids are the agents', read from the env)."""
    if args.multi_agent == "shared":
        return config.multi_agent()
    agents = [str(a) for a in probe_agent_spaces(multi_agent_env_factory(args.env))[0]]
    return config.multi_agent(policies=agents, policy_mapping_fn={a: a for a in agents})


def env_or_factory(text: str) -> str:
    """A gymnasium id, or a multi-agent env's `module:function`."""
    return text if text.count(":") == 1 and not gym_registered(text) else env_id(text)


def gym_registered(text: str) -> bool:
    try:
        env_id(text)
    except argparse.ArgumentTypeError:
        return False
    return True


def _distributed_kwargs(args) -> dict:
    """The multi-host flags that were given (the rest stay None: JAX's environment then)."""
    keys = ("coordinator_address", "num_processes", "process_id")
    out = {k: getattr(args, k) for k in keys if getattr(args, k) is not None}
    if args.heartbeat_timeout is not None:
        out["distributed_heartbeat_timeout_s"] = args.heartbeat_timeout
    if args.initialization_timeout is not None:
        out["distributed_initialization_timeout_s"] = args.initialization_timeout
    return out


def run(args) -> int:
    config = config_from_args(args)
    # Built inside run_training's process-0 check: a logger here would open files on every
    # process of a multi-host run.
    logger = lambda: default_logger(args.out, tensorboard=not args.no_tensorboard,  # noqa: E731
                                    wandb_project=args.wandb_project, config=config.to_dict())
    summary = run_training(config, iterations=args.iterations, stop_return=args.stop_return,
                           out_dir=args.out, progress=not args.quiet, emit=emit,
                           logger=logger, plot_x_axis=args.plot_x)
    emit({"command": "train", "algo": args.algo, **summary})
    return 0


# ---------------------------------------------------------------------- help from the registry


def display_names(online: bool) -> list[str]:
    """The registered algorithms that train online (or from offline data), as shown in help."""
    return [registry.display_name(n) for n in registry.names()
            if registry.config_class(n).trains_online == online]


def _listed(items: list[str]) -> str:
    """'A', 'A and B', 'A, B and C'."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def batch_size_defaults() -> str:
    """'1024 for BC and MARWIL, 256 for CQL and IQL': each offline algorithm's default batch."""
    by_size: dict[int, list[str]] = {}
    for n in registry.names():
        cls = registry.config_class(n)
        if not cls.trains_online:
            size = cls.__dataclass_fields__["train_batch_size_per_learner"].default
            by_size.setdefault(size, []).append(registry.display_name(n))
    return ", ".join(f"{size} for {_listed(names)}" for size, names in by_size.items())


def command_help() -> str:
    """The one-line help of `train`, naming the registered algorithms."""
    text = f"train an offline algorithm ({', '.join(display_names(False))}) from offline data"
    online = display_names(True)
    if online:
        text += f", or {_listed(online)} online in --env"
    return text + ", evaluating as it goes"


def _add_algorithm_options(p: argparse.ArgumentParser, algo: str) -> None:
    """One flag per training option the algorithm adds to the base config (`--beta`,
    `--min-q-weight`, ...), with its doc and default; left out, the config's default holds."""
    cls = registry.config_class(algo)
    base = {f.name for f in AlgorithmConfig.options("training")}
    group = p.add_argument_group(f"{algo} options (see `train --algo NAME --help` for others)")
    for f in cls.options("training"):
        if f.name in base:
            continue
        default = cls.__dataclass_fields__[f.name].default
        kind = _flag_type(f.type, default)
        group.add_argument(f"--{f.name.rstrip('_').replace('_', '-')}", dest=f"algo__{f.name}",
                           type=kind, default=argparse.SUPPRESS,
                           metavar=type(default).__name__ if default is not None else "VALUE",
                           help=f"{f.metadata['doc']} (default: {default})")


def _flag_type(annotation, default):
    """The argparse type of a config option, from its annotation (a string under
    `from __future__ import annotations`) or, failing that, its default."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    kinds = {"bool": parse_bool, "int": int, "float": finite_float, "str": str}
    parts = [kinds[p.strip()] for p in text.split("|") if p.strip() in kinds]
    if len(parts) > 1:  # `float | str` (SAC's target_entropy: a number or "auto")
        return _first_that_parses(parts)
    if parts:
        return parts[0]
    return kinds.get(type(default).__name__, str)


def _first_that_parses(kinds: list) -> Callable[[str], Any]:
    """A flag type trying each of `kinds` in order; the last one's error when none parses."""
    def parse(text: str):
        for kind in kinds[:-1]:
            try:
                return kind(text)
            except (ValueError, argparse.ArgumentTypeError):
                continue
        return kinds[-1](text)

    return parse


def register(sub, algo: str = DEFAULT_ALGO) -> None:
    """Adds `train` to the subcommands `sub`, with the own flags of algorithm `algo`."""
    online = [n for n in registry.names() if registry.config_class(n).trains_online]
    p = add_command(
        sub, "train", command_help(),
        "  rljax-offline train --input data/cartpole --iterations 20 --out runs/bc\n"
        "  rljax-offline train --algo ppo --env CartPole-v1 --stop-return 450 "
        "--out runs/ppo\n"
        "  rljax-offline train --algo cql --min-q-weight 5 --input data/mixed --out runs/cql\n"
        "  rljax-offline train --input minari:cartpole/expert-v0 --stop-return 450\n"
        "  rljax-offline train --multi-agent shared --env mpe2.simple_spread_v3:parallel_env "
        "--input data/spread\n"
        "  rljax-offline train --algo ppo --env StatelessCartPole-v1 "
        "--model-config '{\"use_lstm\": true, \"max_seq_len\": 16}'\n"
        "  tensorboard --logdir runs/bc", run)
    p.add_argument("--algo", default=DEFAULT_ALGO, choices=registry.names(),
                   help="the algorithm; `train --algo NAME --help` lists its own options")
    p.add_argument("--input", default=None, nargs="+",
                   help="Parquet files/folders/globs/URIs, or minari:DATASET_ID (every "
                        f"algorithm but the online ones: {', '.join(online)})")
    p.add_argument("--stream", action="store_true",
                   help="stream the episodes from the files through a shuffle buffer instead "
                        "of keeping the data on the devices (RLlib's materialize_data=False "
                        "and materialize_mapped_data=False); a resumed run goes on with "
                        "exactly the batches it would have had")
    p.add_argument("--shuffle-buffer-size", type=non_negative_int, default=None,
                   help="with --stream: episodes in the shuffle buffer, reshuffled each "
                        "epoch (default 0: the files' order)")
    p.add_argument("--env", default="CartPole-v1", type=env_or_factory,
                   help="gymnasium env id the data comes from (spaces and evaluation); with "
                        "--multi-agent a multi-agent env's module:function "
                        "(mpe2.simple_spread_v3:parallel_env)")
    p.add_argument("--multi-agent", choices=["shared", "per-agent"], default=None,
                   help="multi-agent data and env: one module every agent shares, or one "
                        "per agent (RLlib's multi_agent(policies, policy_mapping_fn))")
    p.add_argument("--iterations", type=positive_int, default=50,
                   help="training iterations (each runs --updates-per-iteration updates)")
    p.add_argument("--stop-return", type=finite_float, default=None,
                   help="stop once the evaluation return mean reaches this")
    p.add_argument("--lr", type=positive_float, default=None,
                   help="learning rate (default: the algorithm's, RLlib's where it has one)")
    p.add_argument("--batch-size", type=batch_size, default=None,
                   help="timesteps per update (train_batch_size_per_learner; default: the "
                        f"algorithm's, {batch_size_defaults()})")
    p.add_argument("--updates-per-iteration", type=positive_int, default=None,
                   help="gradient updates per iteration, one jitted lax.scan (default 100)")
    p.add_argument("--hiddens", type=positive_int, nargs="+", default=[256, 256],
                   help="hidden layer sizes of the policy MLP (fcnet_hiddens)")
    p.add_argument("--model-config", type=model_config, default={},
                   help="more of RLlib's model-config keys as a JSON object, over --hiddens: "
                        "'{\"use_lstm\": true, \"max_seq_len\": 20}' (or use_gru, "
                        "lstm_cell_size, conv_filters, ...) for recurrent or image policies")
    p.add_argument("--num-devices", default="all",
                   type=device_count,
                   help="local accelerators to train on data-parallel: a number or 'all'")
    p.add_argument("--eval-interval", type=non_negative_int, default=1,
                   help="evaluate every this many iterations (0: never)")
    p.add_argument("--eval-episodes", type=positive_int, default=5,
                   help="episodes per evaluation")
    p.add_argument("--out", default="rljax_runs/bc",
                   help="run folder: checkpoint, metrics.jsonl, TensorBoard events, plot; an "
                        "existing run there resumes from its checkpoint")
    p.add_argument("--plot-x", choices=["iteration", "updates", "samples"],
                   default="iteration", help="x-axis of the learning-curve plot")
    p.add_argument("--no-tensorboard", action="store_true",
                   help="do not write TensorBoard event files under --out")
    p.add_argument("--wandb-project", default=None,
                   help="also log to this Weights & Biases project (needs wandb installed)")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of params, data order and envs")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    multi = p.add_argument_group(
        "multi-host (jax.distributed; left out: JAX_COORDINATOR_ADDRESS and the cluster's "
        "environment, as jax.distributed.initialize reads them)")
    multi.add_argument("--coordinator-address", default=None, metavar="HOST:PORT",
                       help="process 0's address; every process passes the same")
    multi.add_argument("--num-processes", type=positive_int, default=None, metavar="N",
                       help="processes in the run, one per host (or per device group)")
    multi.add_argument("--process-id", type=non_negative_int, default=None, metavar="I",
                       help="this process, 0 to N-1; process 0 writes --out")
    multi.add_argument("--heartbeat-timeout", type=positive_int, default=None, metavar="SECONDS",
                       help="a peer silent this long is dead: the others end with an error "
                            "(default 10)")
    multi.add_argument("--initialization-timeout", type=positive_int, default=None,
                       metavar="SECONDS",
                       help="how long to wait for every process to join (default 60)")
    add_read_options(p)
    _add_algorithm_options(p, algo)
