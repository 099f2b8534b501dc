"""`TrainedPolicy`: what a trained algorithm acts with, as one value, and loading it from a
checkpoint without building the algorithm.

The learner produces it (`Algorithm.policy()`); the actor (`acting.actor.actor_for`), export
(`export.policy_parts`), off-policy evaluation (`ope.estimate`, `ope.evaluation`), recording
(`acting.recording.record_policy`) and fine-tuning (`algorithms.fine_tuning`) consume it.
It holds the networks (the acting spec: `act`, its distribution, a recurrent policy), their
params, the connector pipelines and the learner pipeline's fitted state (a mean-std filter's
statistics), host copies, so nothing of the training run (devices, data, optimizer, threads)
comes with it.

`load_policy(path)` reads any registered algorithm's checkpoint (old ones too): the config
class by the registry name in `meta.json`, the spaces from the config's env, the spec and
pipelines from the config, and the params and connector state out of the saved `TrainState`,
shaped by `learning.init.state_template` (nothing compiles). It imports no algorithm module:
the registry names the config class (`rljax_offline.registry`).

Example:
    >>> from rljax_offline.learning.trained_policy import load_policy
    >>> policy = load_policy("/tmp/ppo_ckpt")   # no Algorithm is built, nothing compiles
    >>> policy.algo_name
    'ppo'
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import jax
import numpy as np

from rljax_offline import registry
from rljax_offline.connectors.core import Spaces, share_states
from rljax_offline.envs.make import make_env
from rljax_offline.errors import ConfigError
from rljax_offline.learning import checkpoint as ckpt
from rljax_offline.learning.init import state_template
from rljax_offline.learning.spec import ActingSpec
from rljax_offline.models.module import Module, acting_module


class TrainedPolicy(NamedTuple):
    """A trained policy (see the module docstring).

    Attributes:
      algo_name: the registry name of the algorithm that trained it.
      config: the algorithm's config (an `AlgorithmConfig`).
      spaces: observation and action specs (`Spaces`).
      gym_spaces: `(observation_space, action_space)` as gymnasium spaces (for env runners
        and readers).
      acting: the `ActingSpec` (`act(params, obs)`, `dist`, a recurrent `policy`).
      pipelines: the algorithm's pipelines (`algorithms.pipelines.Pipelines`: `learner`,
        `env_to_module`, `module_to_env`, `columns`, `rows`).
      params: every network's params (host arrays).
      connector_state: the learner pipeline's fitted state (host arrays).
    """

    algo_name: str
    config: Any
    spaces: Spaces
    gym_spaces: tuple
    acting: ActingSpec | None
    pipelines: Any
    params: dict
    connector_state: Any

    @property
    def module(self) -> Module:
        """The Module the actor and export run: `act` on all the params, and a recurrent
        `policy` on `params[policy_network]`."""
        a = self.acting
        return acting_module(a.act, a.dist, a.policy, a.policy_network, a.takes_key)

    @property
    def is_stateful(self) -> bool:
        return bool(self.acting is not None and self.acting.is_stateful)

    @property
    def lookback(self) -> int:
        """Past steps the env-to-module pipeline reads (RLlib's
        `episode_lookback_horizon`)."""
        return int(self.config.episode_lookback_horizon)

    @property
    def gamma(self) -> float:
        return float(self.config.gamma)

    @property
    def seed(self) -> int:
        return int(self.config.seed)

    def env_to_module_state(self) -> Any:
        """The env-to-module state: fresh, but for each piece the learner pipeline has by the
        same name, the state the learner fitted."""
        return _shared(self.pipelines.env_to_module, self.spaces, self.pipelines.learner,
                       self.connector_state)

    def rows_state(self) -> Any:
        """The state of `pipelines.rows` (the learner's fitted state, piece by piece)."""
        return _shared(self.pipelines.rows, self.spaces, self.pipelines.learner,
                       self.connector_state)


def _shared(target, spaces: Spaces, learner, learner_state: Any) -> Any:
    return share_states(target, target.init(spaces), learner, jax.device_get(learner_state))


def env_spaces(config: Any) -> tuple:
    """`(observation_space, action_space)` of the config's env (made and closed).

    Args:
      config: an `AlgorithmConfig` (its `env` and `env_config`).
    """
    env = make_env(config.env, config.env_config)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def saved_config(path: str, meta: dict | None = None) -> Any:
    """The config a checkpoint was trained with, rebuilt from its `meta.json` by the config
    class the registry names; a named error when it held code (custom connector pieces,
    readers, initializers), which the caller must pass again.

    Args:
      path: the checkpoint folder.
      meta: its `meta.json` when already read.
    """
    meta = ckpt.load_meta(path) if meta is None else meta
    saved = meta["config"]
    cls = registry.config_class(meta.get("algorithm", "bc"))
    code = cls.code_options(saved)
    if any(k != "input_filesystem" for k in code):
        raise ConfigError(f"this checkpoint was trained with code in its config {code} "
                          "(custom connector pieces, readers or hooks): pass the same config "
                          "to from_checkpoint(path, config) / load_policy(path, config)")
    return cls.from_dict(saved)


def make_policy(config: Any, gym_spaces: tuple, params: dict, connector_state: Any,
                parts: tuple | None = None) -> TrainedPolicy:
    """A `TrainedPolicy` of `config` for the spaces, with these params and fitted state.

    Args:
      config: the algorithm's config.
      gym_spaces: `(observation_space, action_space)`, gymnasium spaces.
      params: every network's params.
      connector_state: the learner pipeline's fitted state.
      parts: the config's `(spec, pipelines)` when already built (else built here).
    """
    spaces = Spaces.of(*gym_spaces)
    spec, pipes = parts if parts is not None else config.policy_parts(spaces)
    return TrainedPolicy(config.algo_name, config, spaces, tuple(gym_spaces), spec.acting,
                         pipes, jax.device_get(params), jax.device_get(connector_state))


def load_policy(path: str | os.PathLike, config: Any = None,
                seed: int | None = None) -> TrainedPolicy:
    """The trained policy of the checkpoint at `path` (any registered algorithm, any
    checkpoint format this version restores), without building the algorithm.

    Args:
      path: the checkpoint folder.
      config: the run's config, needed when it held code (see `saved_config`).
      seed: which seed, for a checkpoint of several (`debugging(seeds=...)`'s);
        a named error names them when it is missing or not among them.
    """
    path = os.fspath(path)
    meta = ckpt.load_meta(path)
    saved = meta.get("algorithm", "bc")
    seeds = meta.get("seeds")
    if seeds is not None and seed not in seeds:
        raise ckpt.CheckpointError(f"checkpoint {path!r} holds the runs of seeds {seeds}: "
                                   "pick one with load_policy(path, seed=...)")
    if config is None:
        config = saved_config(path, meta)
    elif config.algo_name != saved:
        raise ckpt.CheckpointError(f"checkpoint {path!r} holds a {saved!r} algorithm, not "
                                   f"{config.algo_name!r}")
    gym_spaces = env_spaces(config)
    spaces = Spaces.of(*gym_spaces)
    spec, pipes = config.policy_parts(spaces)
    template = state_template(spec.learning, pipes.learner.init(spaces))
    if seeds is not None:  # one stacked state: the template gets the seed axis
        template = jax.tree_util.tree_map(
            lambda x: np.zeros((len(seeds), *np.shape(x)), np.asarray(x).dtype), template)
        state = jax.tree_util.tree_map(lambda x: x[seeds.index(seed)],
                                       ckpt.load_state(path, template))
        config = config.debugging(seed=seed, seeds=None)
    else:
        state = ckpt.load_state(path, template)
    return make_policy(config, gym_spaces, state.params, state.connector_state, (spec, pipes))
