"""Starting an online learner (PPO, SAC, online fine-tuning) from a checkpoint: the checks
that say, in one `PolicyMismatchError` line, why a checkpoint cannot start it (other spaces,
no policy network, another action distribution, other network shapes), the loading, and the
build that starts from it."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import numpy as np

from rljax_offline.acting.recording import PolicyMismatchError, check_policy_spaces
from rljax_offline.algorithms.config import AlgorithmConfig
from rljax_offline.learning.spec import ActingSpec
from rljax_offline.learning.trained_policy import load_policy

_DIST_NAMES = {"squashed_gaussian": "a tanh-squashed Gaussian", "gaussian": "a plain Gaussian",
               "categorical": "a categorical",
               "deterministic": "a deterministic (tanh) policy"}


class StartingPoint(NamedTuple):
    """What a checkpoint gives the learner it starts: its algorithm's name, its params and
    its learner connector state (host copies)."""

    algo_name: str
    params: dict
    connector_state: Any


def policy_refusal(src: ActingSpec, params: dict, mine: ActingSpec, learner: str) -> str | None:
    """Why a checkpoint's algorithm, acting as `src` (with `params`), cannot give `learner`
    (acting as `mine`) its policy weights; None when it can."""
    if src.policy_network != "policy" and src.policy_network is not None or (
            "policy" not in params):
        return ("it acts greedily in its Q networks and has no policy network to start from"
                if src.policy_network == "q" else "it has no policy network")
    theirs, ours = getattr(src.dist, "kind", ""), getattr(mine.dist, "kind", "")
    if theirs != ours:
        return (f"its policy is {_DIST_NAMES.get(theirs, theirs or 'another distribution')}, "
                f"{learner}'s is {_DIST_NAMES.get(ours, ours)}: the same weights would mean "
                "other actions")
    return None


def load_start(path: str, spaces: Any, mine: ActingSpec, learner: str,
               accepted: str) -> StartingPoint:
    """The checkpoint at `path` (its `TrainedPolicy`, no algorithm built), checked to act
    in `spaces` with `learner`'s kind of policy (`policy_refusal`); `accepted` ends the
    refusal's line, naming what can start it."""
    src = load_policy(path)
    check_policy_spaces(src.spaces, *spaces, path)
    refusal = policy_refusal(src.acting, src.params, mine, learner)
    if refusal:
        raise PolicyMismatchError(f"checkpoint {path!r} ({src.algo_name}) cannot start "
                                  f"{learner}: {refusal}; {accepted}")
    return StartingPoint(src.algo_name, src.params, src.connector_state)


def check_same_shapes(path: str, what: str, theirs: Any, mine: Any, why: str) -> None:
    """A `PolicyMismatchError` naming `what` when the checkpoint's network `theirs` has other
    shapes than this config's `mine`; `why` says which setting decides them."""
    shapes = lambda t: jax.tree_util.tree_map(np.shape, t)
    if shapes(theirs) != shapes(mine):
        raise PolicyMismatchError(f"checkpoint {path!r}: its {what} has other shapes than "
                                  f"this config's {why}")


def build_started(config: AlgorithmConfig, path: str, **changes: Any) -> Any:
    """`config` (with `changes`) built with no `init_from`, then started from the checkpoint at
    `path` (the algorithm's `start_from`); stopped again when the start fails. Its config
    names no checkpoint: its own checkpoints hold the weights it started from."""
    algo = AlgorithmConfig.build(dataclasses.replace(config, init_from=None, **changes))
    try:
        algo.start_from(path)
    except BaseException:
        algo.stop()
        raise
    return algo
