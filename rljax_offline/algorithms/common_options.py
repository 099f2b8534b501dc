"""The options every algorithm's config shares, each declared once with `option(default, group,
check, doc)` under RLlib's name and group (`environment`, `offline_data`, `training`,
`learners`, `evaluation`, `reporting`, `checkpointing`, `rl_module`, `env_runners`,
`debugging`). `AlgorithmConfig` (`algorithms.config`) adds the group methods, the checks across
options and the build; an algorithm's config adds its own options and overrides defaults."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from rljax_offline.algorithms.options import (
    a_callable,
    boolean,
    callable_or_none,
    dict_or_none,
    distinct_seeds,
    either,
    host_port,
    module_ids,
    module_policies,
    non_empty_str,
    non_negative_float,
    non_negative_int,
    one_of,
    open_unit_interval,
    option,
    optional,
    positive_float,
    positive_int,
    probability,
    str_list,
)


@dataclasses.dataclass(frozen=True)
class CommonOptions:
    """Every algorithm's options (see the module docstring); their docs are the `doc` of each
    `option`, listed in the generated config reference."""

    # environment
    env: Any = option("CartPole-v1", "environment", None,
                      "gymnasium env id, or a factory env_config -> env, to evaluate in")
    env_config: dict = option({}, "environment", dict_or_none, "kwargs for the env")
    # offline_data
    input_: Any = option(None, "offline_data", None,
                         "files, folders, globs or URIs of the offline data")
    input_read_episodes: bool = option(True, "offline_data", boolean,
                                       "episode rows (True) or tabular rows (False)")
    input_read_schema: dict | None = option(None, "offline_data", dict_or_none,
                                            "column mapping for foreign tabular data")
    input_filesystem: Any = option(None, "offline_data", None, "a pyarrow filesystem")
    input_filesystem_kwargs: dict | None = option(None, "offline_data", dict_or_none,
                                                  "kwargs for the filesystem")
    input_read_batch_size: int | None = option(None, "offline_data", optional(positive_int),
                                               "episodes read per streamed chunk")
    materialize_data: bool = option(True, "offline_data", boolean,
                                    "read the data once and keep it on the devices")
    shuffle_buffer_size: int = option(0, "offline_data", non_negative_int,
                                      "episodes in the streaming shuffle buffer")
    prefetch_batches: int = option(2, "offline_data", non_negative_int,
                                   "batches kept in flight when streaming")
    on_bad_file: str = option("raise", "offline_data", one_of("raise", "skip"),
                              "what to do with an unreadable file")
    input_read_method: Any = option(
        "read_parquet", "offline_data", either(one_of("read_parquet", "read_json"), a_callable),
        "read_parquet, read_json (old SampleBatch JSON lines), or a callable "
        "(input_, **input_read_method_kwargs) -> iterable of Episodes")
    input_read_method_kwargs: dict | None = option(
        None, "offline_data", dict_or_none, "keyword args for the read method")
    input_read_sample_batches: bool = option(False, "offline_data", boolean,
                                             "the input is RLlib's old SampleBatch JSON")
    input_compress_columns: list | None = option(
        None, "offline_data", optional(str_list),
        "LZ4-compressed tabular columns (compressed columns are also detected by themselves)")
    materialize_mapped_data: bool = option(
        True, "offline_data", boolean, "keep the learner pipeline's output on the devices "
        "(with materialize_data=False too); both False: stream")
    dataset_num_iters_per_learner: int | None = option(
        None, "offline_data", optional(positive_int),
        "updates per train() call (RLlib's name; overrides num_updates_per_iteration)")
    prelearner_class: Any = option(
        None, "offline_data", callable_or_none,
        "RLlib's OfflinePreLearner hook: cls(config=, spaces=) called on each list of "
        "episodes read, returning the episodes the learner pipeline gets")
    prelearner_buffer_class: Any = option(
        None, "offline_data", None, "RLlib's episode buffer class",
        ignored="timesteps are sampled from the device-resident data (or the stream) here")
    prelearner_buffer_kwargs: dict | None = option(
        None, "offline_data", dict_or_none, "its kwargs",
        ignored="timesteps are sampled from the device-resident data (or the stream) here")
    map_batches_kwargs: dict | None = option(
        None, "offline_data", dict_or_none, "Ray Data map_batches knobs",
        ignored="a Ray Data knob: the learner pipeline runs jitted on the devices here")
    iter_batches_kwargs: dict | None = option(
        None, "offline_data", dict_or_none,
        "Ray Data iter_batches knobs: prefetch_batches and local_shuffle_buffer_size map to "
        "ours, the rest is ignored")
    output: str | None = option(
        None, "offline_data", optional(non_empty_str), "record every episode the env runners "
        "sample (training and evaluation) as Parquet under this folder or URI, in RLlib's "
        "layout <output>/<env>/run-<runner>-<write>/")
    output_write_episodes: bool = option(True, "offline_data", boolean,
                                         "episode rows (True) or tabular rows (False)")
    output_max_rows_per_file: int | None = option(
        None, "offline_data", optional(positive_int), "rows per written file (None: one file "
        "until save() or stop())")
    output_compress_columns: list | None = option(
        None, "offline_data", optional(str_list), "tabular columns written LZ4-compressed")
    output_write_remaining_data: bool = option(
        True, "offline_data", boolean, "on stop(), write the episodes of a file not yet "
        "full (RLlib's default False drops them; ours keeps every recorded episode)")
    output_filesystem: Any = option(None, "offline_data", None,
                                    "a pyarrow filesystem, or 's3', 'gcs', 'local'")
    output_filesystem_kwargs: dict | None = option(None, "offline_data", dict_or_none,
                                                   "kwargs for the output filesystem")
    sample_unit: str = option(
        "timesteps", "offline_data", one_of("timesteps", "episodes", "windows"),
        "what the on-device sampler draws, uniformly with replacement: timesteps (RLlib's "
        "default; a sequence model's fixed max_seq_len sequences), whole episodes (their "
        "steps in order until the batch is full) or a transformer's context windows ending "
        "at any step (d3rlpy's)")
    # training
    lr: float = option(1e-3, "training", positive_float, "learning rate")
    gamma: float = option(0.99, "training", probability, "discount factor")
    train_batch_size_per_learner: int = option(1024, "training", positive_int,
                                               "rows of one update, over all devices")
    num_updates_per_iteration: int = option(100, "training", positive_int,
                                            "updates per train() call")
    grad_clip: float | None = option(None, "training", optional(positive_float),
                                     "clip gradients by this global norm")
    learner_connector: Callable | None = option(
        None, "training", callable_or_none, "spaces -> extra learner connector pieces")
    add_default_connectors_to_learner_pipeline: bool = option(
        True, "training", boolean, "put the default learner pieces after the custom ones")
    # learners
    num_devices: int | str = option("all", "learners", either(one_of("all"), positive_int),
                                    "'all' local devices or the first N")
    update_mode: str = option("shard_map", "learners", one_of("shard_map", "pmap", "jit"),
                              "how the per-device update runs (jit: one device)")
    num_learners: int = option(0, "learners", non_negative_int,
                               "RLlib's remote learner count",
                               ignored="one learner per process uses every local device "
                                       "(num_devices); hosts join through jax.distributed")
    num_gpus_per_learner: float = option(0, "learners", non_negative_float,
                                         "RLlib's GPUs per learner",
                                         ignored="JAX uses the devices it sees (num_devices)")
    coordinator_address: str | None = option(
        None, "learners", optional(host_port), "multi-host: process 0's HOST:PORT "
        "(default: JAX_COORDINATOR_ADDRESS or the cluster's, as jax.distributed reads them)")
    num_processes: int | None = option(None, "learners", optional(positive_int),
                                       "multi-host: how many processes run the program")
    process_id: int | None = option(None, "learners", optional(non_negative_int),
                                    "multi-host: this process's index, 0 to num_processes-1")
    distributed_initialization_timeout_s: int = option(
        60, "learners", positive_int, "multi-host: seconds to wait for every process to join")
    distributed_heartbeat_timeout_s: int = option(
        10, "learners", positive_int, "multi-host: seconds after which a silent peer is "
        "declared dead and the others end with an error")
    compilation_cache_dir: str | None = option(
        "auto", "learners", optional(non_empty_str), "persistent XLA compilation cache: 'auto' "
        "(the user's cache dir), a folder, or None (off; so does "
        "RLJAX_OFFLINE_COMPILATION_CACHE=0)")
    # evaluation
    evaluation_interval: int = option(1, "evaluation", non_negative_int,
                                      "evaluate every N iterations (0: never)")
    evaluation_duration: int = option(5, "evaluation", positive_int, "episodes per evaluation")
    evaluation_num_envs: int = option(5, "evaluation", positive_int, "vectorised eval envs")
    evaluation_explore: bool = option(False, "evaluation", boolean,
                                      "sample actions at evaluation instead of greedy")
    evaluation_num_env_runners: int = option(
        0, "evaluation", non_negative_int, "RLlib's evaluation EnvRunner count; when > 0, "
        "the number of vectorised evaluation envs")
    evaluation_parallel_to_training: bool = option(
        False, "evaluation", boolean, "RLlib's overlap of evaluation and training",
        ignored="evaluation runs after the iteration's updates, in the same process")
    off_policy_estimation_methods: dict | None = option(
        None, "evaluation", dict_or_none, "RLlib's OPE methods, name -> {'type': is, wis, "
        "pdis, wpdis, fqe, dr (or RLlib's class names), **options} (rljax_offline.ope), "
        "estimated each evaluation on the ope_split episodes")
    ope_split: float = option(0.1, "evaluation", open_unit_interval,
                              "share of the offline data's episodes held out of training "
                              "for off-policy evaluation (by episode id, seeded)")
    # reporting
    metrics_num_episodes_for_smoothing: int = option(
        100, "reporting", positive_int, "episodes the return statistics average over")
    # checkpointing
    checkpoint_frequency: int = option(1, "checkpointing", non_negative_int,
                                       "iterations between checkpoints in run_training")
    # rl_module
    model_config: dict = option({"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"},
                                "rl_module", dict_or_none, "RLlib's model-config keys")
    # env_runners
    env_to_module_connector: Callable | None = option(
        None, "env_runners", callable_or_none, "spaces -> extra env-to-module pieces")
    add_default_connectors_to_env_to_module_pipeline: bool = option(
        True, "env_runners", boolean, "put the default env-to-module pieces after the custom")
    episode_lookback_horizon: int = option(0, "env_runners", non_negative_int,
                                           "past steps env-to-module pieces read")
    batch_mode: str = option(
        "truncate_episodes", "env_runners", one_of("truncate_episodes", "complete_episodes"),
        "online sampling: cut episodes at the sampled step count and continue them next "
        "time (truncate_episodes), or sample whole episodes only (complete_episodes); "
        "evaluation always runs whole episodes")
    rollout_fragment_length: int | str = option(
        "auto", "env_runners", either(one_of("auto"), positive_int),
        "online sampling: env steps per env in one sampling round; an iteration samples "
        "whole rounds ('auto': exactly the iteration's step count)")
    # multi_agent (algorithms.multi_agent)
    policies: dict | None = option(
        None, "multi_agent", module_policies, "module ids (RLlib's policies), each None or a "
        "dict of config overrides for that module; None: single-agent")
    policy_mapping_fn: Any = option(
        None, "multi_agent", either(dict_or_none, a_callable), "(agent_id, episode, "
        "**kwargs) -> module id, or a dict agent id -> module id (None: every agent to "
        "default_policy)")
    policies_to_train: list | None = option(
        None, "multi_agent", optional(module_ids), "the modules that train (None: all)")
    count_steps_by: str = option(
        "env_steps", "multi_agent", one_of("env_steps", "agent_steps"),
        "what train_batch_size_per_learner counts: env steps (a module's batch holds that "
        "many steps of each of its agents) or agent steps (that many rows per module)")
    # debugging
    seed: int = option(0, "debugging", non_negative_int, "seed of init, sampling and envs")
    seeds: list | None = option(
        None, "debugging", optional(distinct_seeds), "several independent runs, one per "
        "seed, trained in one compiled program over a seed axis (build() returns "
        "algorithms.seeds.SeedRuns; offline algorithms on materialized data); None: one run "
        "of `seed`")
