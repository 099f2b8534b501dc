"""`estimate(policy_or_checkpoint, data, methods=...)`: OPE without building an algorithm
config, for notebooks and the CLI.

`policy_or_checkpoint`: a checkpoint folder (any registered algorithm; its trained policy is
loaded, `learning.trained_policy.load_policy`, without building the algorithm), a
`TrainedPolicy`, an `Algorithm` (its current `policy()`), or a plain function
(`ope.target`'s protocol: Discrete `obs -> probabilities [N, n]`, Box `obs -> (mean, std)`;
it reads the raw observations and needs `action_space`).
`data`: Parquet files, folders or globs (read as `input_read_episodes` says), or a list of
`Episode`s; every episode is evaluated (hold your evaluation share out of training yourself,
or use `ope.data.split`).

Example:
    >>> from rljax_offline import ope
    >>> results = ope.estimate("/tmp/ckpt", "/tmp/cartpole_mixed",
    ...                        methods=["wis", "fqe", "dr"], gamma=0.95)
    >>> results["dr"]["v_target"], results["dr"]["v_target_ci"]
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.data import read_episodes
from rljax_offline.episode.episode import Episode
from rljax_offline.errors import OPEError
from rljax_offline.learning.trained_policy import TrainedPolicy, load_policy
from rljax_offline.ope.data import data_action_space, raw_columns
from rljax_offline.ope.evaluation import evaluate_policy
from rljax_offline.ope.methods import parse_methods
from rljax_offline.ope.run import run
from rljax_offline.ope.target import from_function

DEFAULT_METHODS = ("is", "wis", "pdis", "wpdis", "fqe", "dr")


def load_episodes(data: Any, input_read_episodes: bool = True) -> list[Episode]:
    """`data` as a list of episodes, so every OPE entry point takes paths or episodes alike.

    Args:
      data: a list of `Episode`s (returned as is), or Parquet files, folders or globs (or a
        list of them), read with `data.read_episodes`.
      input_read_episodes: the files hold episode rows (RLlib's episode format) when True,
        tabular rows (one timestep a row) when False.

    Returns:
      The episodes.

    Raises:
      OPEError: the files hold no episode.
    """
    if isinstance(data, Sequence) and data and all(isinstance(e, Episode) for e in data):
        return list(data)
    episodes = read_episodes(data, input_read_episodes=input_read_episodes)
    if not episodes:
        raise OPEError(f"no episodes in {data!r}")
    return episodes


def estimate(policy_or_checkpoint: str | os.PathLike | TrainedPolicy | Any, data: Any,
             methods: Sequence[str] | dict = DEFAULT_METHODS, *, gamma: float | None = None,
             explore: bool = True, action_space: Any = None, observation_space: Any = None,
             fqe: dict | None = None, num_bootstrap: int = 200, confidence: float = 0.95,
             seed: int = 0, input_read_episodes: bool = True) -> dict[str, dict]:
    """Off-policy estimates of a policy's value on offline data (see the module docstring).

    Args:
      policy_or_checkpoint: a checkpoint folder, a `TrainedPolicy`, an `Algorithm` (its
        current policy) or a policy function (`ope.target`'s protocol).
      data: Parquet files, folders or globs, or a list of `Episode`s; every episode is
        evaluated.
      methods: RLlib's `off_policy_estimation_methods` dict, or a list of types
        (`"is"`, `"wis"`, `"pdis"`, `"wpdis"`, `"fqe"`/`"dm"`, `"dr"`), each its own name.
      gamma: the discount (default: the algorithm's, else 0.99).
      explore: evaluate the policy's action distribution (True) or its greedy actions.
      action_space: the action space of a policy function (required for one; a checkpoint
        knows its own).
      observation_space: a policy function's observation space, for FQE's network (default:
        an unbounded Box of the observations' shape).
      fqe: FQE settings (`ope.methods.FQEOptions` keys) for every method that fits one.
      num_bootstrap: bootstrap resamples of the episodes for the interval on `v_target`.
      confidence: the interval's confidence level.
      seed: the seed of a policy function's bootstrap and FQE (a checkpoint uses its
        config's).
      input_read_episodes: the files hold episode rows (True) or tabular rows (False).

    Returns:
      `{method name: {v_behavior, v_behavior_std, v_target, v_target_std, v_gain, v_delta,
      v_target_ci, ess, num_episodes, ...}}` (`ope.estimators.summarize`).

    Raises:
      OPEError: no episodes, a policy of no known kind, or a function without
        `action_space`.
      ConfigError: a malformed `methods` entry.
    """
    parsed = parse_methods(methods)
    if fqe:
        parsed = {k: m._replace(fqe=m.fqe._replace(**fqe)) if m.needs_q else m
                  for k, m in parsed.items()}
    episodes = load_episodes(data, input_read_episodes)
    policy = policy_or_checkpoint
    if isinstance(policy, (str, os.PathLike)):
        policy = load_policy(policy)
    elif not isinstance(policy, TrainedPolicy) and callable(getattr(policy, "policy", None)):
        policy = policy.policy()  # an Algorithm: its current policy
    if isinstance(policy, TrainedPolicy):
        return evaluate_policy(policy, episodes, parsed, gamma=gamma, explore=explore,
                               num_bootstrap=num_bootstrap, confidence=confidence)
    if not callable(policy):
        raise OPEError("estimate() takes a checkpoint folder, a TrainedPolicy, an Algorithm "
                       f"or a policy function, got {type(policy).__name__}")
    if action_space is None:
        raise OPEError("estimate(policy_function, ...) needs action_space= (the policy's "
                       "gymnasium action space)")
    columns, lengths = raw_columns(episodes)
    obs_spec = (sp.to_spec(observation_space) if observation_space is not None
                else sp.to_spec(_obs_space_of(columns["obs"])))
    return run(parsed, columns, lengths, from_function(policy, action_space), obs_spec,
               data_action_space(episodes, action_space), 0.99 if gamma is None else gamma,
               num_bootstrap=num_bootstrap, confidence=confidence, seed=seed)


def _obs_space_of(obs) -> Any:
    """An unbounded Box of the observations' shape (for FQE's network), when none is given."""
    obs = np.asarray(obs)
    return gym.spaces.Box(-np.inf, np.inf, obs.shape[1:], np.float32)
