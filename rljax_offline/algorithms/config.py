"""`AlgorithmConfig`: immutable configs with RLlib's method groups and parameter names.

Every field is declared once with `option(default, group, check, doc)` (`algorithms.options`,
with the checks). The group methods (`environment`, `offline_data`, `training`, `evaluation`,
`learners`, `reporting`, `checkpointing`, `rl_module`, `env_runners`, `debugging`) take that
group's keys as keyword arguments and return a new config; keys left out keep their value
(RLlib's `NotProvided`).
An unknown key, or a value of the wrong type or range, is a one-line `ConfigError` naming the
key and what was expected, raised before anything compiles.

An algorithm subclasses `AlgorithmConfig`, adds its own `training` options, names itself
(`algo_name`, the registry key) and turns itself into an `AlgorithmSpec` (its learning,
acting and data, `learning.spec`) in `make_spec`.

Example:
    >>> from rljax_offline import MARWILConfig
    >>> config = (MARWILConfig()
    ...           .environment("CartPole-v1")
    ...           .offline_data(input_=["/tmp/cartpole"])
    ...           .training(beta=1.0, lr=1e-3, train_batch_size_per_learner=1024))
    >>> config.beta
    1.0
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import warnings
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from rljax_offline import spaces as sp
from rljax_offline.algorithms.options import (
    a_callable,
    boolean,
    callable_or_none,
    dict_or_none,
    either,
    host_port,
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
from rljax_offline.errors import ConfigError
from rljax_offline.models.model_config import DefaultModelConfig, check_model_config
from rljax_offline.ope.methods import as_data, parse_methods
from rljax_offline.runtime.setup import setup


def _from_iter_batches_kwargs(kwargs: dict) -> dict:
    """Ray Data's `iter_batches` knobs that have an equivalent here; warns about the rest."""
    ours = {}
    if kwargs.get("prefetch_batches") is not None:
        ours["prefetch_batches"] = kwargs["prefetch_batches"]
    if kwargs.get("local_shuffle_buffer_size") is not None:
        ours["shuffle_buffer_size"] = kwargs["local_shuffle_buffer_size"]
    rest = sorted(set(kwargs) - {"prefetch_batches", "local_shuffle_buffer_size"})
    if rest:
        warnings.warn(f"offline_data(iter_batches_kwargs=...): {rest} have no effect in "
                      "rljax_offline (only prefetch_batches and local_shuffle_buffer_size map to "
                      "prefetch_batches and shuffle_buffer_size)", UserWarning, stacklevel=4)
    return ours


# ---------------------------------------------------------------------- the base


def _code(value) -> dict:
    """How `to_dict` writes code (a callable, a filesystem): its name, to be passed again."""
    return {"code": getattr(value, "__name__", type(value).__name__)}


@dataclasses.dataclass(frozen=True)
class AlgorithmConfig:
    """Settings every algorithm shares (see the module docstring)."""

    algo_name: ClassVar[str] = ""
    # What `build()` makes: a class, or "module:Class" imported on first build (so this module
    # imports no algorithm code: configs and algorithms have no import cycle).
    algorithm_class: ClassVar[Any] = "rljax_offline.algorithms.algorithm:Algorithm"
    # True where the algorithm learns from its own env rollouts (PPO), not from `input_`.
    trains_online: ClassVar[bool] = False

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
        "timesteps", "offline_data", one_of("timesteps", "episodes"),
        "what the on-device sampler draws, uniformly with replacement: timesteps (RLlib's "
        "default) or whole episodes (their steps in order until the batch is full)")
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
    # debugging
    seed: int = option(0, "debugging", non_negative_int, "seed of init, sampling and envs")

    def __post_init__(self):
        self.validate()

    # ------------------------------------------------------------------ groups

    @classmethod
    def options(cls, group: str | None = None) -> list[dataclasses.Field]:
        """The config's fields (of one group)."""
        return [f for f in dataclasses.fields(cls)
                if group is None or f.metadata.get("group") == group]

    def _update(self, group: str, kwargs: dict) -> AlgorithmConfig:
        valid = {f.name for f in self.options(group)}
        unknown = sorted(set(kwargs) - valid)
        if unknown:
            raise ConfigError(f"{type(self).__name__}.{group}() got unknown key(s) {unknown}; "
                              f"valid: {sorted(valid)}")
        if group == "rl_module" and isinstance(kwargs.get("model_config"), DefaultModelConfig):
            # RLlib's dataclass: a whole model config, its defaults for what it leaves out.
            kwargs = {**kwargs, "model_config": kwargs["model_config"].to_dict()}
        elif group == "rl_module" and isinstance(kwargs.get("model_config"), dict):
            kwargs = {**kwargs, "model_config": {**self.model_config, **kwargs["model_config"]}}
        fields = {f.name: f for f in self.options(group)}
        for k, v in kwargs.items():
            reason = fields[k].metadata.get("ignored")
            if reason and v not in (None, {}, [], 0, False):
                warnings.warn(f"{group}({k}=...) has no effect in rljax_offline: {reason}",
                              UserWarning, stacklevel=3)
        if kwargs.get("iter_batches_kwargs"):
            kwargs = {**kwargs, **_from_iter_batches_kwargs(kwargs["iter_batches_kwargs"])}
        if kwargs.get("evaluation_num_env_runners"):
            kwargs = {**kwargs, "evaluation_num_envs": kwargs["evaluation_num_env_runners"]}
        return dataclasses.replace(self, **kwargs)

    def api_stack(self, enable_rl_module_and_learner: bool = True,
                  enable_env_runner_and_connector_v2: bool = True) -> AlgorithmConfig:
        """RLlib's API-stack switch: only its new stack (RLModule, Learner, ConnectorV2)
        exists here, so both must stay True."""
        if not (enable_rl_module_and_learner and enable_env_runner_and_connector_v2):
            raise ConfigError("api_stack: only RLlib's new API stack exists in rljax_offline; "
                              "both flags must be True")
        return self

    def environment(self, env: Any = None, **kwargs) -> AlgorithmConfig:
        """The env to evaluate in (a gymnasium id or a factory `env_config -> env`)."""
        return self._update("environment", {**({"env": env} if env is not None else {}),
                                            **kwargs})

    def offline_data(self, **kwargs) -> AlgorithmConfig:
        """Where the data is and how to read it (RLlib's names). `materialize_data=True`
        keeps it on the devices; False streams it with a shuffle buffer and prefetch."""
        return self._update("offline_data", kwargs)

    def training(self, **kwargs) -> AlgorithmConfig:
        """Optimizer, batch and the algorithm's own loss settings."""
        return self._update("training", kwargs)

    def evaluation(self, **kwargs) -> AlgorithmConfig:
        """Evaluate every `evaluation_interval` iterations for `evaluation_duration` episodes
        in the env; with `off_policy_estimation_methods`, also off-policy estimates of the
        policy on the `ope_split` share of the offline data's episodes, held out of
        training (`result["evaluation"]["off_policy_estimator"][name]`, `rljax_offline.ope`)."""
        if "off_policy_estimation_methods" in kwargs:
            kwargs = {**kwargs, "off_policy_estimation_methods": as_data(
                kwargs["off_policy_estimation_methods"])}
        return self._update("evaluation", kwargs)

    def learners(self, **kwargs) -> AlgorithmConfig:
        """Which local devices the data-parallel learner uses, and how its update runs."""
        return self._update("learners", kwargs)

    def reporting(self, **kwargs) -> AlgorithmConfig:
        return self._update("reporting", kwargs)

    def checkpointing(self, **kwargs) -> AlgorithmConfig:
        return self._update("checkpointing", kwargs)

    def rl_module(self, **kwargs) -> AlgorithmConfig:
        """`model_config`: a dict of RLlib's model-config keys (merged into the current one),
        or RLlib's `DefaultModelConfig` (the whole config, RLlib's defaults for the rest;
        `models.model_config`)."""
        return self._update("rl_module", kwargs)

    def env_runners(self, **kwargs) -> AlgorithmConfig:
        """Evaluation-side connectors; by default the env-to-module pipeline uses the learner
        pipeline's custom pieces (one piece serves both)."""
        return self._update("env_runners", kwargs)

    def debugging(self, **kwargs) -> AlgorithmConfig:
        return self._update("debugging", kwargs)

    # ------------------------------------------------------------------ checks

    @property
    def updates_per_iteration(self) -> int:
        """Updates one `train()` runs: RLlib's `dataset_num_iters_per_learner` when set."""
        return self.dataset_num_iters_per_learner or self.num_updates_per_iteration

    @property
    def streams_data(self) -> bool:
        """Stream from the files (both of RLlib's materialize flags False) rather than keep
        the learner columns on the devices."""
        return not (self.materialize_data or self.materialize_mapped_data)

    @property
    def update_batch_size(self) -> int:
        """Timesteps one update trains on: `train_batch_size_per_learner` (an online
        algorithm's minibatch where its train batch is the whole rollout)."""
        return self.train_batch_size_per_learner

    @property
    def reads_sample_batches(self) -> bool:
        return self.input_read_sample_batches or self.input_read_method == "read_json"

    def validate(self) -> None:
        """Every field against its check; then the algorithm's cross-field rules."""
        for f in dataclasses.fields(self):
            check = f.metadata.get("check")
            if check is None:
                continue
            expected = check(getattr(self, f.name))
            if expected is not None:
                raise ConfigError(f"{type(self).__name__}: {f.name} must be {expected}, got "
                                  f"{getattr(self, f.name)!r}")
        try:
            check_model_config(self.model_config or {})
        except ValueError as e:
            raise ConfigError(f"{type(self).__name__}: {e}") from None
        if not self.trains_online and self.rollout_fragment_length != "auto":
            raise ConfigError(f"{type(self).__name__}: rollout_fragment_length sets the steps "
                              "an online algorithm samples per env and round; this one trains "
                              "from offline data and evaluates whole episodes (leave 'auto')")
        if parse_methods(self.off_policy_estimation_methods) and self.streams_data:
            raise ConfigError(f"{type(self).__name__}: off_policy_estimation_methods hold "
                              "ope_split episodes out of materialized data; set "
                              "materialize_data=True (streamed data is not split)")

    def check_spaces(self, obs_spec, act_spec) -> None:
        """A named error for spaces this algorithm cannot handle (before compiling)."""
        if not isinstance(act_spec, (sp.DiscreteSpec, sp.BoxSpec)):
            raise ConfigError(f"{type(self).__name__} supports Discrete and Box action spaces, "
                              f"got {act_spec}")

    # ------------------------------------------------------------------ the algorithm

    def learner_connector_pieces(self, spaces) -> list:
        """The pieces in front of the default learner pipeline, shared with the env-to-module
        pipeline with their fitted state (unless `env_to_module_connector` replaces them):
        the user's `learner_connector`. An algorithm whose data needs a fitted transform at
        acting too (TD3+BC's observation normalization) puts its own in front."""
        return list(self.learner_connector(spaces)) if self.learner_connector else []

    def make_spec(self, obs_spec, act_spec):
        """The algorithm's `AlgorithmSpec` (`learning.spec`) for (post-connector) observation
        and action specs."""
        raise NotImplementedError(f"{type(self).__name__} does not define make_spec")

    def policy_parts(self, spaces):
        """`(AlgorithmSpec, Pipelines)` for `spaces`: a trained policy's code (`load_policy`)."""
        from rljax_offline.algorithms import pipelines  # it imports this module
        return pipelines.build(self, spaces)

    def build(self):
        """The algorithm for this config (an instance of `algorithm_class`), in two steps:

        1. `runtime.setup.setup(self)`, the process-wide setup this config asks for, before
           JAX uses a device: joining a multi-process run (`coordinator_address`,
           `num_processes`, `process_id`, or `JAX_COORDINATOR_ADDRESS`) and the persistent
           compilation cache (`compilation_cache_dir`; None: off).
        2. `algorithm_class(self, process)`: spaces, pipelines and devices; the init program
           then compiles on a background thread while the caller goes on (reading the data),
           and the algorithm's `state` waits for it on first use.
        """
        self.validate()
        process = setup(self)
        cls = self.algorithm_class
        if isinstance(cls, str):
            module, attr = cls.split(":")
            cls = getattr(importlib.import_module(module), attr)
        return cls(self, process)

    # ------------------------------------------------------------------ io

    def to_dict(self) -> dict:
        """JSON-friendly dict. Code and live objects (callables, filesystems) cannot be
        saved: they appear as `{"code": name}` and must be passed again on restore."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if callable(v) or (f.name in ("input_filesystem", "output_filesystem")
                               and v is not None and not isinstance(v, str)):
                v = _code(v)
            elif isinstance(v, Sequence) and not isinstance(v, str):
                v = list(v)
            elif isinstance(v, dict):  # model_config: a flax initializer is code too
                v = {k: _code(x) if callable(x) else x for k, x in v.items()}
            out[f.name] = v
        return json.loads(json.dumps(out, default=str))

    @staticmethod
    def code_options(d: dict) -> list[str]:
        """The keys of a `to_dict()` output that held code (not restorable from JSON); inside
        a dict option as `option.key`."""
        def is_code(v):
            return isinstance(v, dict) and set(v) == {"code"}

        return sorted([k for k, v in d.items() if is_code(v)]
                      + [f"{k}.{i}" for k, v in d.items() if isinstance(v, dict)
                         and not is_code(v) for i, x in v.items() if is_code(x)])

    @classmethod
    def from_dict(cls, d: dict) -> AlgorithmConfig:
        """A config from `to_dict()` output (keys this class does not know are a named
        error; options that held code are left at their defaults: pass them again)."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - fields)
        if unknown:
            raise ConfigError(f"{cls.__name__} has no options {unknown}")
        code = set(cls.code_options(d))
        return cls(**{k: v for k, v in d.items() if k not in code})

    def help(self) -> str:
        """One line per option: group, name, default, doc."""
        return "\n".join(f"{f.metadata['group']:>14}  {f.name} = {getattr(self, f.name)!r}  "
                         f"# {f.metadata['doc']}" for f in dataclasses.fields(self))
