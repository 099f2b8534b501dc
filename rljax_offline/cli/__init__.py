"""`rljax-offline`: record, train, evaluate, convert, inspect, export, demo: offline RL data
and offline algorithms (BC, MARWIL, CQL, IQL) from the command line.

Every command prints progress on long work and its results as JSON lines on stdout, so runs
can be piped into `jq` or a log; `train` and `demo` also save a learning-curve PNG, and `train`
writes TensorBoard events under its `--out`.

Failures never print a traceback: one line `error: ...` on stderr, exit code 2 for a usage
error (a bad flag or value), 1 for bad data, a damaged checkpoint or a diverged run
(`RLJAX_DEBUG=1` re-raises, for bug reports).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import textwrap
import time

_INPUTS = ("Data: RLlib's Parquet formats (episode rows or tabular rows) on local disk or any "
           "pyarrow filesystem, and Minari datasets as minari:DATASET_ID (found through "
           "MINARI_DATASETS_PATH as Minari does).")


#: Largest train batch accepted on the command line (timesteps): beyond this the batch of a
#: small model alone needs gigabytes; lower it or use the Python API deliberately.
MAX_BATCH_SIZE = 1 << 22


# ---------------------------------------------------------------------- argument types


def _int_at_least(low: int):
    """An argparse type: a whole number >= `low`, with a one-line message otherwise."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a whole number >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return parse


positive_int = _int_at_least(1)
non_negative_int = _int_at_least(0)


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def batch_size(text: str) -> int:
    value = positive_int(text)
    if value > MAX_BATCH_SIZE:
        raise argparse.ArgumentTypeError(
            f"{value} timesteps a batch would not fit in accelerator memory for any model "
            f"this CLI builds (limit {MAX_BATCH_SIZE}); use a smaller batch")
    return value


def _json(text: str) -> object:
    """A flag's JSON value; invalid JSON is a usage error quoting the text."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise argparse.ArgumentTypeError(f"not valid JSON ({e}): {text[:80]!r}") from None


def json_object(text: str) -> dict:
    value = _json(text)
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise argparse.ArgumentTypeError(
            'expected a JSON object of column names, e.g. \'{"obs": "o_t"}\'')
    return value


def model_config(text: str) -> dict:
    """RLlib's model-config keys as a JSON object; unknown keys are refused by name."""
    from rljax_offline.models.policy import MODEL_CONFIG_DEFAULTS

    value = _json(text)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            'expected a JSON object of model-config keys, e.g. \'{"use_lstm": true}\'')
    unknown = sorted(set(value) - set(MODEL_CONFIG_DEFAULTS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown model-config keys {unknown}; supported: "
                                         f"{sorted(MODEL_CONFIG_DEFAULTS)}")
    return value


def device_count(text: str):
    return text if text == "all" else positive_int(text)


def env_id(text: str) -> str:
    import gymnasium as gym

    from rljax_offline.envs.make import register_envs

    register_envs()  # our own ids (StatelessCartPole-v1) are valid on the command line

    try:
        gym.spec(text)
    except Exception:  # noqa: BLE001 - gymnasium raises several error types for unknown ids
        raise argparse.ArgumentTypeError(f"unknown gymnasium env id {text!r}") from None
    return text


EXPERT_ENVS = ("CartPole-v1", "Pendulum-v1")  # envs with a shipped scripted expert


class UsageError(ValueError):
    """Flags that parse one by one but make no sense together (exit code 2)."""


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line `error: ...` and exit code 2 (no usage dump)."""

    def error(self, message: str):
        self.exit(2, f"error: {self.prog}: {message} (see --help)\n")


def _emit(record: dict) -> None:
    print(json.dumps(record, default=float), flush=True)


def _add_read_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tabular", action="store_true",
                   help="the input is in tabular rows (one timestep a row), not episode rows")
    p.add_argument("--schema", type=json_object, default=None, metavar="JSON",
                   help='input_read_schema mapping, e.g. \'{"obs": "o_t", "actions": "a_t"}\'')
    p.add_argument("--on-bad-file", choices=["raise", "skip"], default="raise",
                   help="what to do with an unreadable file: stop with its name, or skip it "
                        "and report it")


def _input(args):
    """One input as a string (so `minari:ID` is recognised), several as a list."""
    return args.input[0] if len(args.input) == 1 else list(args.input)


def _read_kwargs(args) -> dict:
    return dict(input_read_episodes=not args.tabular, input_read_schema=args.schema,
                on_bad_file=args.on_bad_file)


# ---------------------------------------------------------------------- commands


def cmd_record(args) -> int:
    from rljax_offline.acting.env_runner import record_expert
    from rljax_offline.acting.recording import record_policy
    from rljax_offline.apps.recipes import recipe
    from rljax_offline.errors import OutputExistsError

    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise OutputExistsError(f"--output {args.output!r} is an existing file; record writes "
                                "a folder of Parquet files (an existing folder is added to)")
    if args.rllib_layout and args.tabular:
        raise UsageError("--rllib-layout is a layout of episode rows: drop it or --tabular")
    if args.compress_columns and not args.tabular:
        raise UsageError("--compress-columns compresses tabular columns: add --tabular")
    env, mix, episodes = args.env, args.mix, args.episodes
    if args.dataset is not None:
        if mix is not None:
            raise UsageError("give --dataset or --mix, not both")
        r = recipe(args.dataset)
        env, mix, episodes = r.env_id, r.mix, episodes or r.num_episodes
    episodes = episodes or 500
    t0 = time.perf_counter()
    write = dict(output_write_episodes=not args.tabular,
                 output_max_rows_per_file=args.max_rows_per_file,
                 output_compress_columns=args.compress_columns, rllib_layout=args.rllib_layout)
    if args.policy is None:
        if env not in EXPERT_ENVS:
            raise UsageError(f"no scripted expert for {env!r} (have {list(EXPERT_ENVS)}): "
                             "give --policy CHECKPOINT to record a trained policy")
        files = record_expert(env, args.output, num_episodes=episodes, seed=args.seed,
                              num_envs=args.num_envs, epsilon=args.epsilon,
                              flip_prob=args.flip_prob, action_noise=args.action_noise, mix=mix,
                              **write)
    else:
        if mix is not None or args.epsilon or args.flip_prob or args.action_noise:
            raise UsageError("behaviour mixes (--dataset, --mix, --epsilon, --flip-prob, "
                             "--action-noise) apply to the scripted experts, not --policy")
        files = record_policy(env, args.policy, args.output, num_episodes=episodes,
                              seed=args.seed, num_envs=args.num_envs, explore=args.explore,
                              **write)
    _emit({"command": "record", "env": env, "output": args.output, "mix": mix,
           "policy": args.policy or "scripted expert", "episodes": episodes, "files": len(files),
           "seconds": round(time.perf_counter() - t0, 2)})
    return 0


def _config_from_args(args):
    from rljax_offline.algorithms import config_class

    cls = config_class(args.algo)
    if cls.trains_online and args.input:
        raise UsageError(f"--algo {args.algo} trains online in --env from its own rollouts; "
                         "--input is for the offline algorithms")
    if not cls.trains_online and not args.input:
        raise UsageError(f"--algo {args.algo} trains from offline data: give --input")
    training = {k[len("algo__"):]: v for k, v in vars(args).items() if k.startswith("algo__")}
    given = {"lr": args.lr, "train_batch_size_per_learner": args.batch_size,
             "num_updates_per_iteration": args.updates_per_iteration}
    training.update({k: v for k, v in given.items() if v is not None})
    offline = {} if cls.trains_online else dict(input_=_input(args), **_read_kwargs(args))
    if args.shuffle_buffer_size is not None and not args.stream:
        raise UsageError("--shuffle-buffer-size is for streamed data: add --stream")
    if args.stream:
        if cls.trains_online:
            raise UsageError(f"--stream is for offline data; --algo {args.algo} trains online")
        offline.update(materialize_data=False, materialize_mapped_data=False)
        if args.shuffle_buffer_size is not None:
            offline["shuffle_buffer_size"] = args.shuffle_buffer_size
    return (cls()
            .environment(args.env)
            .offline_data(**offline)
            .training(**training)
            .learners(num_devices=args.num_devices, **_distributed_kwargs(args))
            .evaluation(evaluation_interval=args.eval_interval,
                        evaluation_duration=args.eval_episodes)
            .rl_module(model_config={"fcnet_hiddens": args.hiddens, **args.model_config})
            .debugging(seed=args.seed))


def _distributed_kwargs(args) -> dict:
    """The multi-host flags that were given (the rest stay None: JAX's environment then)."""
    keys = ("coordinator_address", "num_processes", "process_id")
    out = {k: getattr(args, k) for k in keys if getattr(args, k) is not None}
    if args.heartbeat_timeout is not None:
        out["distributed_heartbeat_timeout_s"] = args.heartbeat_timeout
    if args.initialization_timeout is not None:
        out["distributed_initialization_timeout_s"] = args.initialization_timeout
    return out


def cmd_train(args) -> int:
    from rljax_offline.apps.reporting import default_logger
    from rljax_offline.apps.training_loop import run_training

    config = _config_from_args(args)
    # Built inside run_training's process-0 check: a logger here would open files on every
    # process of a multi-host run.
    logger = lambda: default_logger(args.out, tensorboard=not args.no_tensorboard,  # noqa: E731
                                    wandb_project=args.wandb_project, config=config.to_dict())
    summary = run_training(config, iterations=args.iterations, stop_return=args.stop_return,
                           out_dir=args.out, progress=not args.quiet, emit=_emit,
                           logger=logger, plot_x_axis=args.plot_x)
    _emit({"command": "train", "algo": args.algo, **summary})
    return 0


def cmd_evaluate(args) -> int:
    from rljax_offline.algorithms.algorithm import Algorithm

    algo = Algorithm.from_checkpoint(args.checkpoint)
    result = algo.evaluate(num_episodes=args.episodes)
    if args.log_dir:
        from rljax_offline.apps.reporting import default_logger

        with default_logger(args.log_dir, tensorboard=not args.no_tensorboard) as log:
            log.log({"evaluation": {"env_runners": result}}, step=algo.iteration)
    _emit({"command": "evaluate", "checkpoint": args.checkpoint, **result})
    return 0


def cmd_convert(args) -> int:
    from rljax_offline.data import SkipReport, convert_dataset
    from rljax_offline.data.inspect import convert_minari
    from rljax_offline.data.minari import is_minari_input

    skipped = SkipReport()
    source = _input(args)
    if args.to == "minari" or is_minari_input(source):
        if args.to == "minari" and not is_minari_input(args.output):
            raise UsageError(f"--to minari writes a Minari dataset: give --output as "
                             f"minari:DATASET_ID, got {args.output!r}")
        files = convert_minari(source, args.output, to=args.to, env=args.env,
                               output_max_rows_per_file=args.max_rows_per_file,
                               **({"input_read_schema": args.schema} if args.schema else {}))
    else:
        files = convert_dataset(args.input, args.output, to=args.to,
                                input_read_schema=args.schema,
                                output_max_rows_per_file=args.max_rows_per_file,
                                on_bad_file=args.on_bad_file, skipped=skipped)
    _emit({"command": "convert", "to": args.to, "output": args.output, "files": len(files),
           "skipped_files": [list(s) for s in skipped],
           "dropped_episodes": len(skipped.dropped_episodes)})
    return 0


def cmd_inspect(args) -> int:
    from rljax_offline.data import inspect_dataset
    from rljax_offline.data.minari import is_minari_input, minari_summary

    source = _input(args)
    summary = (minari_summary(source) if is_minari_input(source)
               else inspect_dataset(args.input, **_read_kwargs(args)))
    _emit({"command": "inspect", **summary})
    return 0


def cmd_export(args) -> int:
    from rljax_offline.algorithms.algorithm import Algorithm
    from rljax_offline.export import signature_path

    algo = Algorithm.from_checkpoint(args.checkpoint)
    path = algo.export_policy(args.output, format=args.format)
    with open(signature_path(path)) as f:
        signature = json.load(f)
    # what the graph takes, so a deployer sees at once whether it is `act(obs)` or a step
    # with state and `t` (the sidecar has the shapes)
    _emit({"command": "export", "checkpoint": args.checkpoint, "format": args.format,
           "output": path, "bytes": os.path.getsize(path), "signature": signature_path(path),
           "call": signature["call"], "inputs": [i["name"] for i in signature["inputs"]],
           "outputs": [o["name"] for o in signature["outputs"]]})
    return 0


def cmd_demo(args) -> int:
    from rljax_offline.apps.demo import run_demo, run_full_demo

    (run_full_demo if args.full else run_demo)(
        out_dir=args.out, num_episodes=args.episodes, seed=args.seed,
        progress=not args.quiet, emit=_emit)
    return 0


# ---------------------------------------------------------------------- parser


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter,
                     argparse.RawDescriptionHelpFormatter):
    """Shows every flag's default (where it has one worth showing) and keeps the examples'
    line breaks."""

    def _get_help_string(self, action):
        if action.required or any(action.default is v for v in (None, False,
                                                                argparse.SUPPRESS)):
            return action.help
        return super()._get_help_string(action)


def _sub(sub, name: str, help: str, examples: str, func) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".",
                       epilog="examples:\n" + examples, formatter_class=_HelpFormatter)
    p.set_defaults(func=func)
    return p


def _add_algorithm_options(p: argparse.ArgumentParser, algo: str) -> None:
    """One flag per training option the algorithm adds to the base config (`--beta`,
    `--min-q-weight`, ...), with its doc and default; left out, the config's default holds."""
    from rljax_offline.algorithms import AlgorithmConfig, config_class

    cls = config_class(algo)
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
    for name, kind in (("bool", _parse_bool), ("int", int), ("float", finite_float),
                       ("str", str)):
        if text.split("|")[0].strip() == name:
            return kind
    return {bool: _parse_bool, int: int, float: finite_float, str: str}.get(type(default), str)


def _parse_bool(text: str) -> bool:
    low = text.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def build_parser(algo: str = "bc") -> argparse.ArgumentParser:
    """The CLI; `train`'s algorithm-specific flags are those of `algo`."""
    from rljax_offline.algorithms import names
    from rljax_offline.apps.recipes import RECIPES

    ap = _Parser(
        prog="rljax-offline", formatter_class=_HelpFormatter,
        description=__doc__.split("\n\n")[0] + "\n\n" + textwrap.fill(_INPUTS, 79),
        epilog="Run `rljax-offline COMMAND --help` for a command's flags and examples.")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND",
                            parser_class=_Parser)

    p = _sub(sub, "record", "record episodes of a scripted expert, or of a trained policy "
             "(--policy CHECKPOINT), to Parquet",
             "  rljax-offline record --output data/cartpole --episodes 200\n"
             "  rljax-offline record --output data/tab --tabular --max-rows-per-file 10000\n"
             "  rljax-offline record --output data/mixed --dataset cartpole-mixed\n"
             "  rljax-offline record --output data/mix --mix 'expert:0.1,random:0.6,flip0.4:0.3'\n"
             "  rljax-offline record --env CartPole-v1 --policy runs/ppo/checkpoint "
             "--output data/ppo",
             cmd_record)
    p.add_argument("--env", default="CartPole-v1", type=env_id,
                   help=f"gymnasium env id (scripted experts: {', '.join(EXPERT_ENVS)})")
    p.add_argument("--policy", default=None, metavar="CHECKPOINT",
                   help="record this checkpoint's policy (any algorithm) instead of the "
                        "scripted expert")
    p.add_argument("--explore", action="store_true",
                   help="with --policy: sample actions instead of acting greedily")
    p.add_argument("--output", required=True, help="folder or URI (s3://...) to write into")
    p.add_argument("--episodes", type=positive_int, default=None,
                   help="number of complete episodes to record (default 500, or the "
                        "--dataset recipe's size)")
    p.add_argument("--num-envs", type=positive_int, default=8,
                   help="vectorised env copies stepped together")
    p.add_argument("--tabular", action="store_true",
                   help="write tabular rows (one timestep a row) instead of episode rows")
    p.add_argument("--max-rows-per-file", type=positive_int, default=None,
                   help="start a new file after this many rows (RLlib's "
                        "output_max_rows_per_file: episodes, or timesteps with --tabular); "
                        "default: one file")
    p.add_argument("--rllib-layout", action="store_true",
                   help="episode rows byte-identical to RLlib's recorder (per-step lists) "
                        "instead of our faster one-array-per-buffer encoding")
    p.add_argument("--compress-columns", nargs="+", default=None, metavar="COLUMN",
                   help="tabular columns to LZ4-compress as RLlib's output_compress_columns "
                        "does (e.g. obs new_obs); needs --tabular")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of the env resets (and of the behaviour draws)")
    p.add_argument("--epsilon", type=finite_float, default=0.0,
                   help="probability of a uniformly random action instead of the expert's")
    p.add_argument("--flip-prob", type=finite_float, default=0.0,
                   help="Discrete: probability that the expert's action is replaced by another")
    p.add_argument("--action-noise", type=finite_float, default=0.0, metavar="STD",
                   help="Box: Gaussian noise on the expert's action, clipped to the bounds")
    p.add_argument("--mix", default=None,
                   help="one behaviour per episode, drawn by weight, e.g. "
                        "'expert:0.1,random:0.6,flip0.4:0.3' (behaviours: expert, random, epsP, "
                        "flipP, noiseSTD, joined with '+'); kept in custom_data['behavior']")
    p.add_argument("--dataset", default=None, choices=sorted(RECIPES),
                   help="a mixed-quality recipe of rljax_offline.apps.recipes (sets --env, --mix "
                        "and the episode count)")

    p = _sub(sub, "train", "train an offline algorithm (BC, MARWIL, CQL, IQL) from offline "
             "data, or PPO online in --env, evaluating as it goes",
             "  rljax-offline train --input data/cartpole --iterations 20 --out runs/bc\n"
             "  rljax-offline train --algo ppo --env CartPole-v1 --stop-return 450 "
             "--out runs/ppo\n"
             "  rljax-offline train --algo cql --min-q-weight 5 --input data/mixed --out runs/cql\n"
             "  rljax-offline train --input minari:cartpole/expert-v0 --stop-return 450\n"
             "  rljax-offline train --algo ppo --env StatelessCartPole-v1 "
             "--model-config '{\"use_lstm\": true, \"max_seq_len\": 16}'\n"
             "  tensorboard --logdir runs/bc", cmd_train)
    p.add_argument("--algo", default="bc", choices=names(),
                   help="the algorithm; `train --algo NAME --help` lists its own options")
    p.add_argument("--input", default=None, nargs="+",
                   help="Parquet files/folders/globs/URIs, or minari:DATASET_ID (every "
                        "algorithm but the online ones, e.g. ppo)")
    p.add_argument("--stream", action="store_true",
                   help="stream the episodes from the files through a shuffle buffer instead "
                        "of keeping the data on the devices (RLlib's materialize_data=False "
                        "and materialize_mapped_data=False); a resumed run goes on with "
                        "exactly the batches it would have had")
    p.add_argument("--shuffle-buffer-size", type=non_negative_int, default=None,
                   help="with --stream: episodes in the shuffle buffer, reshuffled each "
                        "epoch (default 0: the files' order)")
    p.add_argument("--env", default="CartPole-v1", type=env_id,
                   help="gymnasium env id the data comes from (spaces and evaluation)")
    p.add_argument("--iterations", type=positive_int, default=50,
                   help="training iterations (each runs --updates-per-iteration updates)")
    p.add_argument("--stop-return", type=finite_float, default=None,
                   help="stop once the evaluation return mean reaches this")
    p.add_argument("--lr", type=positive_float, default=None,
                   help="learning rate (default: the algorithm's, RLlib's where it has one)")
    p.add_argument("--batch-size", type=batch_size, default=None,
                   help="timesteps per update (train_batch_size_per_learner; default: the "
                        "algorithm's, 1024 for BC and MARWIL, 256 for CQL and IQL)")
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
    _add_read_options(p)
    _add_algorithm_options(p, algo)

    p = _sub(sub, "evaluate", "run a checkpoint's greedy policy in its env",
             "  rljax-offline evaluate --checkpoint runs/bc/checkpoint --episodes 20",
             cmd_evaluate)
    p.add_argument("--checkpoint", required=True, help="checkpoint folder written by train")
    p.add_argument("--episodes", type=positive_int, default=10, help="episodes to run")
    p.add_argument("--log-dir", default=None,
                   help="also log the results (metrics.jsonl and TensorBoard events, at the "
                        "checkpoint's iteration) into this folder, e.g. the run's --out")
    p.add_argument("--no-tensorboard", action="store_true",
                   help="with --log-dir: JSON lines only")

    p = _sub(sub, "convert", "convert between tabular rows, episode rows, SampleBatch JSON "
             "and Minari datasets",
             "  rljax-offline convert --input data/cartpole --output data/tab --to tabular\n"
             "  rljax-offline convert --input minari:D4RL/door/human-v2 --output data/door "
             "--to episodes\n"
             "  rljax-offline convert --input data/cartpole --output minari:cartpole/bc-v0 "
             "--to minari --env CartPole-v1", cmd_convert)
    p.add_argument("--input", required=True, nargs="+",
                   help="Parquet files/folders/globs, SampleBatch .json files, or "
                        "minari:DATASET_ID")
    p.add_argument("--output", required=True,
                   help="output folder, or minari:DATASET_ID with --to minari")
    p.add_argument("--to", choices=["episodes", "tabular", "minari"], required=True,
                   help="output format")
    p.add_argument("--env", default=None,
                   help="gymnasium env id recorded in a Minari output (and its spaces when "
                        "the input files carry none)")
    p.add_argument("--schema", type=json_object, default=None, metavar="JSON",
                   help="input_read_schema mapping of the input's column names")
    p.add_argument("--max-rows-per-file", type=positive_int, default=None,
                   help="rows per output Parquet file (default: one file)")
    p.add_argument("--on-bad-file", choices=["raise", "skip"], default="raise",
                   help="what to do with an unreadable input file: stop with its name, or skip "
                        "it and report it")

    p = _sub(sub, "inspect", "summarize a data set: episodes, timesteps, returns, schema",
             "  rljax-offline inspect --input data/cartpole\n"
             "  rljax-offline inspect --input minari:cartpole/expert-v0", cmd_inspect)
    p.add_argument("--input", required=True, nargs="+",
                   help="Parquet files/folders/globs/URIs, or minari:DATASET_ID")
    _add_read_options(p)

    p = _sub(sub, "export", "export a checkpoint's greedy policy as a standalone graph "
             "(recurrent and frame-stacking policies as one step with their state and t; "
             "the signature goes to OUTPUT.json)",
             "  rljax-offline export --checkpoint runs/bc/checkpoint --output policy.onnx "
             "--format onnx\n"
             "  rljax-offline export --checkpoint runs/bc/checkpoint --output "
             "policy.stablehlo", cmd_export)
    p.add_argument("--checkpoint", required=True, help="checkpoint folder written by train")
    p.add_argument("--format", choices=["stablehlo", "onnx"], default="stablehlo",
                   help="stablehlo: jax.export, reloads with plain JAX; onnx: for "
                        "onnxruntime and friends (needs the onnx extra)")
    p.add_argument("--output", required=True, help="file to write")

    p = _sub(sub, "demo", "record expert CartPole, train BC, evaluate and plot, in one go",
             "  rljax-offline demo --out demo_output", cmd_demo)
    p.add_argument("--out", default="demo_output", help="folder for data, run and pictures")
    p.add_argument("--episodes", type=positive_int, default=500,
                   help="expert episodes to record")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of recording and training")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--full", action="store_true",
                   help="RLlib's whole guide: train a PPO expert, record from its checkpoint, "
                        "clone it with BC, fine-tune the clone with PPO, one figure")
    return ap


REFERENCE_WIDTH = 100


def help_reference() -> str:
    """Markdown of `rljax-offline --help` and every `COMMAND --help`, at a fixed width: the
    README's CLI reference (`scripts/update_cli_reference.py` writes it there)."""
    ap = build_parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(REFERENCE_WIDTH)
    try:
        parts = [("rljax-offline --help", ap.format_help())]
        parts += [(f"rljax-offline {name} --help", p.format_help())
                  for name, p in sub.choices.items()]
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return "\n".join(f"#### `{title}`\n\n```text\n{text.rstrip()}\n```\n"
                     for title, text in parts)


def _algo_of(argv: list[str]) -> str:
    """The `--algo` value of a `train` command line (before the full parse), default bc."""
    from rljax_offline.algorithms import names

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--algo", default="bc")
    algo = pre.parse_known_args(argv)[0].algo
    return algo if algo in names() else "bc"  # an unknown name fails in the full parse


def _exit_code(e: BaseException) -> int:
    """2 for usage errors (an invalid value the parser could not see), else 1."""
    from rljax_offline.algorithms.config import ConfigError

    return 2 if isinstance(e, (ConfigError, UsageError)) else 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(_algo_of(argv)).parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"error: rljax-offline {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - the one place every failure becomes one line
        if os.environ.get("RLJAX_DEBUG"):
            raise
        from rljax_offline.errors import RljaxError

        text = " ".join(str(e).split()) or type(e).__name__
        if isinstance(e, MemoryError):
            text = "out of memory (use a smaller --batch-size or fewer episodes)"
        elif not isinstance(e, (RljaxError, ValueError, OSError, KeyError)):
            text = f"internal error {type(e).__name__}: {text} (rerun with RLJAX_DEBUG=1)"
        print(f"error: rljax-offline {args.command}: {text}", file=sys.stderr)
        return _exit_code(e)

