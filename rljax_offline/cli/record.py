"""`rljax-offline record`: episodes of a scripted expert, or of a trained policy, to Parquet;
random actions in a multi-agent env (`--env mpe2:simple_spread_v3`) to the multi-agent
format."""

from __future__ import annotations

import os
import time

from rljax_offline.apps.recipes import RECIPES, recipe
from rljax_offline.cli.args import (
    _json,
    env_id,
    finite_float,
    non_negative_int,
    positive_int,
)
from rljax_offline.cli.output import add_command, emit
from rljax_offline.envs.multi_agent_make import is_multi_agent_env_id
from rljax_offline.errors import OutputExistsError, UsageError

EXPERT_ENVS = ("CartPole-v1", "Pendulum-v1")  # envs with a shipped scripted expert


def any_env_id(text: str) -> str:
    """A gymnasium id, or a multi-agent id (`mpe2:<env>`, `pettingzoo:<module>`,
    `async_agents`), checked when the env is made."""
    return text if is_multi_agent_env_id(text) else env_id(text)


def module_mapping_arg(text: str):
    if text in ("shared", "per-agent"):
        return text
    value = _json(text)
    if not isinstance(value, dict):
        import argparse
        raise argparse.ArgumentTypeError("expected shared, per-agent or a JSON object "
                                         '{"agent": "module"}')
    return value


def env_config_arg(text: str) -> dict:
    value = _json(text)
    if not isinstance(value, dict):
        import argparse
        raise argparse.ArgumentTypeError('expected a JSON object, e.g. \'{"N": 3}\'')
    return value


def run_multi_agent(args) -> int:
    """`record` on a multi-agent env: random actions, one policy per module."""
    from rljax_offline.acting.multi_agent_recording import record_multi_agent

    refused = [flag for flag, on in (
        ("--policy", args.policy is not None), ("--dataset", args.dataset is not None),
        ("--mix", args.mix is not None), ("--epsilon", bool(args.epsilon)),
        ("--flip-prob", bool(args.flip_prob)), ("--action-noise", bool(args.action_noise)),
        ("--explore", args.explore), ("--rllib-layout", args.rllib_layout),
        ("--compress-columns", args.compress_columns is not None)) if on]
    if refused:
        raise UsageError(f"{', '.join(refused)}: not for multi-agent envs ({args.env}), which "
                         "record uniformly random actions per module")
    if args.tabular and args.max_rows_per_file is not None:
        raise UsageError("the multi-agent --tabular layout writes one file per module: drop "
                         "--max-rows-per-file")
    episodes = args.episodes or 100
    t0 = time.perf_counter()
    info = record_multi_agent(args.env, args.output, num_episodes=episodes,
                              env_config=args.env_config,
                              module_mapping_spec=args.module_mapping,
                              num_envs=args.num_envs, seed=args.seed, tabular=args.tabular,
                              max_episodes_per_file=args.max_rows_per_file)
    emit({"command": "record", "env": args.env, "output": args.output,
          "env_factory": info["env"], "policy": "random", "episodes": episodes,
          "files": len(info["files"]),
          "modules": info["modules"], "agents": info["agents"],
          "seconds": round(time.perf_counter() - t0, 2)})
    return 0


def run(args) -> int:
    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise OutputExistsError(f"--output {args.output!r} is an existing file; record writes "
                                "a folder of Parquet files (an existing folder is added to)")
    if is_multi_agent_env_id(args.env):
        return run_multi_agent(args)
    if args.env_config is not None or args.module_mapping != "shared":
        raise UsageError("--env-config and --module-mapping are for multi-agent envs "
                         "(--env mpe2:<env>, pettingzoo:<module>, async_agents or "
                         "module:function)")
    # start-up: acting.env_runner and acting.recording (the algorithm facade) cost ~120 ms
    # on top of `import rljax_offline.cli`; only `record` needs them (measured 2026-11-24).
    from rljax_offline.acting.env_runner import record_expert
    from rljax_offline.acting.recording import record_policy

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
    emit({"command": "record", "env": env, "output": args.output, "mix": mix,
          "policy": args.policy or "scripted expert", "episodes": episodes, "files": len(files),
          "seconds": round(time.perf_counter() - t0, 2)})
    return 0


def register(sub) -> None:
    """Adds `record` and its flags to the subcommands `sub`."""
    p = add_command(
        sub, "record", "record episodes of a scripted expert, or of a trained policy "
        "(--policy CHECKPOINT), to Parquet",
        "  rljax-offline record --output data/cartpole --episodes 200\n"
        "  rljax-offline record --output data/tab --tabular --max-rows-per-file 10000\n"
        "  rljax-offline record --output data/mixed --dataset cartpole-mixed\n"
        "  rljax-offline record --output data/mix --mix 'expert:0.1,random:0.6,flip0.4:0.3'\n"
        "  rljax-offline record --env CartPole-v1 --policy runs/ppo/checkpoint "
        "--output data/ppo\n"
        "  rljax-offline record --env mpe2:simple_spread_v3 --output data/spread "
        "--episodes 100",
        run)
    p.add_argument("--env", default="CartPole-v1", type=any_env_id,
                   help=f"gymnasium id (experts: {', '.join(EXPERT_ENVS)}); multi-agent:"
                        " mpe2:<env>, pettingzoo:<module>, async_agents, "
                        "module:function")
    p.add_argument("--env-config", type=env_config_arg, default=None, metavar="JSON",
                   help="multi-agent env: its constructor's arguments")
    p.add_argument("--module-mapping", type=module_mapping_arg, default="shared",
                   metavar="SPEC", help="multi-agent: shared, per-agent or JSON {agent: "
                   "module}")
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
