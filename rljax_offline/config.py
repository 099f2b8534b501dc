"""`BCConfig`: an immutable behavior-cloning config with RLlib's method groups.

Each group method (`environment`, `offline_data`, `training`, `learners`, `evaluation`,
`rl_module`, `env_runners`, `debugging`) returns a new config; arguments left out keep their
value, as with RLlib's `NotProvided`. Unknown values fail at once, not deep inside training.

Example:
    >>> from rljax_offline import BCConfig
    >>> config = (BCConfig()
    ...           .environment("CartPole-v1")
    ...           .offline_data(input_=["/tmp/cartpole"])
    ...           .training(lr=1e-3, train_batch_size_per_learner=1024)
    ...           .evaluation(evaluation_interval=1, evaluation_duration=10))
    >>> config.train_batch_size_per_learner
    1024
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

_NOT_PROVIDED: Any = object()


class ConfigError(ValueError):
    """A config value is invalid (named in the message)."""


@dataclasses.dataclass(frozen=True)
class BCConfig:
    """Behavior cloning settings; see the module docstring. Build with `config.build()`."""

    # environment
    env: Any = "CartPole-v1"
    env_config: dict = dataclasses.field(default_factory=dict)
    # offline_data
    input_: Any = None
    input_read_episodes: bool = True
    input_read_schema: dict | None = None
    input_filesystem: Any = None
    input_filesystem_kwargs: dict | None = None
    input_read_batch_size: int | None = None
    materialize_data: bool = True
    shuffle_buffer_size: int = 0
    prefetch_batches: int = 2
    on_bad_file: str = "raise"
    # training
    lr: float = 1e-3
    train_batch_size_per_learner: int = 1024
    num_updates_per_iteration: int = 100
    grad_clip: float | None = None
    # learners
    num_devices: int | str = "all"
    # evaluation
    evaluation_interval: int = 1
    evaluation_duration: int = 5
    evaluation_num_envs: int = 5
    evaluation_explore: bool = False
    # rl_module
    model_config: dict = dataclasses.field(
        default_factory=lambda: {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"})
    # connectors: callables spaces -> list of extra pieces, put before the defaults
    learner_connector: Callable | None = None
    env_to_module_connector: Callable | None = None
    add_default_connectors_to_learner_pipeline: bool = True
    add_default_connectors_to_env_to_module_pipeline: bool = True
    episode_lookback_horizon: int = 0
    # debugging
    seed: int = 0

    # ------------------------------------------------------------------ groups

    def _with(self, **kwargs) -> BCConfig:
        changes = {k: v for k, v in kwargs.items() if v is not _NOT_PROVIDED}
        new = dataclasses.replace(self, **changes)
        new.validate()
        return new

    def environment(self, env: Any = _NOT_PROVIDED, *, env_config: dict = _NOT_PROVIDED
                    ) -> BCConfig:
        """The env to evaluate in (a gymnasium id or a factory `env_config -> env`)."""
        return self._with(env=env, env_config=env_config)

    def offline_data(self, *, input_: Any = _NOT_PROVIDED,
                     input_read_episodes: bool = _NOT_PROVIDED,
                     input_read_schema: dict | None = _NOT_PROVIDED,
                     input_filesystem: Any = _NOT_PROVIDED,
                     input_filesystem_kwargs: dict | None = _NOT_PROVIDED,
                     input_read_batch_size: int | None = _NOT_PROVIDED,
                     materialize_data: bool = _NOT_PROVIDED,
                     shuffle_buffer_size: int = _NOT_PROVIDED,
                     prefetch_batches: int = _NOT_PROVIDED,
                     on_bad_file: str = _NOT_PROVIDED) -> BCConfig:
        """Where the data is and how to read it (RLlib's option names).

        `materialize_data=True` reads the data set once and keeps it on the device (fast);
        False streams it from the files with a shuffle buffer and prefetch (bounded memory).
        """
        return self._with(input_=input_, input_read_episodes=input_read_episodes,
                          input_read_schema=input_read_schema, input_filesystem=input_filesystem,
                          input_filesystem_kwargs=input_filesystem_kwargs,
                          input_read_batch_size=input_read_batch_size,
                          materialize_data=materialize_data,
                          shuffle_buffer_size=shuffle_buffer_size,
                          prefetch_batches=prefetch_batches, on_bad_file=on_bad_file)

    def training(self, *, lr: float = _NOT_PROVIDED,
                 train_batch_size_per_learner: int = _NOT_PROVIDED,
                 num_updates_per_iteration: int = _NOT_PROVIDED,
                 grad_clip: float | None = _NOT_PROVIDED,
                 learner_connector: Callable | None = _NOT_PROVIDED,
                 add_default_connectors_to_learner_pipeline: bool = _NOT_PROVIDED) -> BCConfig:
        """Optimizer and batch settings. `train_batch_size_per_learner` is the global batch
        of one update; it is split evenly over the devices."""
        return self._with(lr=lr, train_batch_size_per_learner=train_batch_size_per_learner,
                          num_updates_per_iteration=num_updates_per_iteration,
                          grad_clip=grad_clip, learner_connector=learner_connector,
                          add_default_connectors_to_learner_pipeline=(
                              add_default_connectors_to_learner_pipeline))

    def learners(self, *, num_devices: int | str = _NOT_PROVIDED) -> BCConfig:
        """Which local devices the data-parallel learner uses: "all" or the first N."""
        return self._with(num_devices=num_devices)

    def evaluation(self, *, evaluation_interval: int = _NOT_PROVIDED,
                   evaluation_duration: int = _NOT_PROVIDED,
                   evaluation_num_envs: int = _NOT_PROVIDED,
                   evaluation_explore: bool = _NOT_PROVIDED) -> BCConfig:
        """Evaluate every `evaluation_interval` iterations (0: never) for
        `evaluation_duration` episodes on `evaluation_num_envs` vectorised envs."""
        return self._with(evaluation_interval=evaluation_interval,
                          evaluation_duration=evaluation_duration,
                          evaluation_num_envs=evaluation_num_envs,
                          evaluation_explore=evaluation_explore)

    def env_runners(self, *, env_to_module_connector: Callable | None = _NOT_PROVIDED,
                    add_default_connectors_to_env_to_module_pipeline: bool = _NOT_PROVIDED,
                    episode_lookback_horizon: int = _NOT_PROVIDED) -> BCConfig:
        """Evaluation-side connectors. By default the env-to-module pipeline uses the same
        custom pieces as the learner pipeline (one piece serves both); set
        `episode_lookback_horizon` to the past steps they read (frame stacking of N: N - 1)."""
        return self._with(env_to_module_connector=env_to_module_connector,
                          add_default_connectors_to_env_to_module_pipeline=(
                              add_default_connectors_to_env_to_module_pipeline),
                          episode_lookback_horizon=episode_lookback_horizon)

    def rl_module(self, *, model_config: dict = _NOT_PROVIDED) -> BCConfig:
        """`model_config` keys as RLlib's default model: `fcnet_hiddens`, `fcnet_activation`."""
        if model_config is not _NOT_PROVIDED:
            model_config = {**self.model_config, **dict(model_config)}
        return self._with(model_config=model_config)

    def debugging(self, *, seed: int = _NOT_PROVIDED) -> BCConfig:
        return self._with(seed=seed)

    # ------------------------------------------------------------------ checks, io

    def validate(self) -> None:
        def positive(name):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ConfigError(f"{name} must be a positive int, got {v!r}")

        for name in ("train_batch_size_per_learner", "num_updates_per_iteration",
                     "evaluation_duration", "evaluation_num_envs"):
            positive(name)
        if not (isinstance(self.lr, (int, float)) and self.lr > 0):
            raise ConfigError(f"lr must be a positive number, got {self.lr!r}")
        if not isinstance(self.evaluation_interval, int) or self.evaluation_interval < 0:
            raise ConfigError(f"evaluation_interval must be an int >= 0, got "
                              f"{self.evaluation_interval!r}")
        if self.on_bad_file not in ("raise", "skip"):
            raise ConfigError(f"on_bad_file must be 'raise' or 'skip', got {self.on_bad_file!r}")
        if self.num_devices != "all" and (not isinstance(self.num_devices, int)
                                          or self.num_devices <= 0):
            raise ConfigError(f"num_devices must be 'all' or a positive int, got "
                              f"{self.num_devices!r}")
        unknown = set(self.model_config) - {"fcnet_hiddens", "fcnet_activation"}
        if unknown:
            raise ConfigError(f"unknown model_config keys {sorted(unknown)}; supported: "
                              "fcnet_hiddens, fcnet_activation")

    def to_dict(self) -> dict:
        """JSON-friendly dict (callables and filesystems are shown by name only)."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if callable(v) or f.name == "input_filesystem" and v is not None:
                v = getattr(v, "__name__", type(v).__name__)
            elif isinstance(v, Sequence) and not isinstance(v, str):
                v = list(v)
            out[f.name] = v
        return json.loads(json.dumps(out, default=str))

    def build(self):
        """The `BC` algorithm for this config."""
        from rljax_offline.algorithm import BC

        return BC(self)
