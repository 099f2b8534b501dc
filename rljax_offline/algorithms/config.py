"""`AlgorithmConfig`: immutable configs with RLlib's method groups and parameter names.

Every field is declared once with `option(default, group, check, doc)` (`algorithms.options`,
with the checks). The group methods (`environment`, `offline_data`, `training`, `evaluation`,
`learners`, `reporting`, `checkpointing`, `rl_module`, `env_runners`, `multi_agent`,
`debugging`) take that
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
from collections.abc import Sequence
from typing import Any, ClassVar

from rljax_offline import spaces as sp
from rljax_offline.algorithms.common_options import CommonOptions
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


# What `build()` makes of a multi-agent config (imported on first build, as `algorithm_class`).
MULTI_AGENT_ALGORITHM = "rljax_offline.algorithms.multi_agent:MultiAgentAlgorithm"
SEED_RUNS_CLASS = "rljax_offline.algorithms.seeds:SeedRuns"
DEFAULT_MODULE_ID = "default_policy"

# ---------------------------------------------------------------------- the base


def _code(value) -> dict:
    """How `to_dict` writes code (a callable, a filesystem): its name, to be passed again."""
    return {"code": getattr(value, "__name__", type(value).__name__)}


@dataclasses.dataclass(frozen=True)
class AlgorithmConfig(CommonOptions):
    """Settings every algorithm shares (see the module docstring)."""

    algo_name: ClassVar[str] = ""
    # What `build()` makes: a class, or "module:Class" imported on first build (so this module
    # imports no algorithm code: configs and algorithms have no import cycle).
    algorithm_class: ClassVar[Any] = "rljax_offline.algorithms.algorithm:Algorithm"
    # What `build()` makes of it after `debugging(seeds=[...])`: SEED_RUNS_CLASS.
    # What `build()` makes of it after `multi_agent(...)`.
    multi_agent_class: ClassVar[Any] = MULTI_AGENT_ALGORITHM
    # True where a multi-agent run trains one team module on env-step joint rows (a
    # centralised critic: MATD3+BC) instead of one module per policy.
    trains_team_module: ClassVar[bool] = False
    # True where the algorithm learns from its own env rollouts (PPO), not from `input_`.
    trains_online: ClassVar[bool] = False

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

    def multi_agent(self, *, policies: Any = None, policy_mapping_fn: Any = None,
                    policies_to_train: Any = None, count_steps_by: str | None = None
                    ) -> AlgorithmConfig:
        """RLlib's multi-agent settings; calling it makes the config multi-agent (`build()`
        then makes an `algorithms.multi_agent.MultiAgentAlgorithm`).

        Args:
          policies: module ids: a set or list, or a dict id -> None or a dict of config
            overrides for that module (e.g. `{"model_config": {...}, "lr": 1e-4}`). None:
            one module, `default_policy`, that every agent shares (RLlib's default).
          policy_mapping_fn: `(agent_id, episode, **kwargs) -> module id`, or a dict agent
            id -> module id (saved with checkpoints, unlike a function). None: every agent
            to `default_policy`.
          policies_to_train: the modules that train (None: all); the others keep their
            parameters.
          count_steps_by: `"env_steps"` (RLlib's default: a module's batch holds
            `train_batch_size_per_learner` steps of each of its agents) or `"agent_steps"`
            (that many rows per module).
        """
        if policies is None:
            policies = self.policies or {DEFAULT_MODULE_ID: None}
        elif not isinstance(policies, dict):
            if isinstance(policies, str) or not isinstance(policies, (set, frozenset, list,
                                                                      tuple)):
                raise ConfigError("multi_agent(policies=...) takes module ids (a set, list or "
                                  f"dict), got {policies!r}")
            policies = {m: None for m in sorted(policies, key=str)}
        kwargs: dict = {"policies": dict(policies)}
        if policy_mapping_fn is not None:
            kwargs["policy_mapping_fn"] = policy_mapping_fn
        if policies_to_train is not None:
            if isinstance(policies_to_train, str) or not isinstance(
                    policies_to_train, (set, frozenset, list, tuple)):
                raise ConfigError("multi_agent(policies_to_train=...) takes module ids, got "
                                  f"{policies_to_train!r}")
            kwargs["policies_to_train"] = sorted(policies_to_train, key=str)
        if count_steps_by is not None:
            kwargs["count_steps_by"] = count_steps_by
        return self._update("multi_agent", kwargs)

    @property
    def is_multi_agent(self) -> bool:
        """Whether `multi_agent()` made this config multi-agent."""
        return self.policies is not None

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
        why = ("trains online" if self.trains_online else "streams its data"
               if self.streams_data else "is multi-agent" if self.is_multi_agent else None)
        if self.seeds is not None and why:
            raise ConfigError(f"{type(self).__name__}: debugging(seeds=...) trains offline "
                              f"single-agent algorithms on materialized data in one program; "
                              f"this config {why}")
        if self.sample_unit == "windows" and why:
            raise ConfigError(f"{type(self).__name__}: sample_unit='windows' cuts a sequence "
                              f"model's windows from materialized single-agent offline data; "
                              f"this config {why} (use sample_unit='timesteps')")
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
           and the algorithm's `state` waits for it on first use. With `debugging(seeds=[...])`
           it is `algorithms.seeds.SeedRuns(self, process)` instead: every seed in one
           compiled program.
        """
        self.validate()
        process = setup(self)
        cls = self.multi_agent_class if self.is_multi_agent else self.algorithm_class
        if self.seeds is not None:
            cls = SEED_RUNS_CLASS
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
