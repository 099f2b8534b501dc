"""OPE of a trained policy (`learning.trained_policy.TrainedPolicy`): its target policy (the
acting module and params), the OPE columns of episodes through the front of its learner
pipeline (`Pipelines.rows`: the user's pieces, the model's and RLlib's defaults, so a fitted
mean-std filter or TD3+BC's normalization apply as in training), and the run.

The algorithm's own learner pieces are not run: they make training targets (GAE, which reads
the value network; n-step returns, which would replace the rewards OPE discounts; returns to
go), never the data's rows; the pieces that change the rows as the env saw them (clipping
Box actions inside the bounds, `algorithms.pipelines.ROW_PIECES`) are kept.

The target is the policy's action distribution (RLlib's OPE evaluated its policy's action
probabilities), `explore=False` its greedy actions. Recurrent policies are not supported.
Used by `Algorithm.train()` (the held-out `ope_split` episodes) and `ope.estimate`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import jax

from rljax_offline.connectors.core import Connector
from rljax_offline.connectors.rows import episode_rows
from rljax_offline.episode.episode import Episode
from rljax_offline.errors import EmptyEvaluationSplitError, OPEError
from rljax_offline.ope.data import LOGP, data_action_space, has_logp
from rljax_offline.ope.methods import Method
from rljax_offline.ope.run import check_inputs, run
from rljax_offline.ope.target import TargetPolicy, from_acting

COLUMNS = ("obs", "actions", "rewards", "new_obs", "terminateds")


def policy_target(policy: Any, explore: bool = True) -> TargetPolicy:
    """The target of a `TrainedPolicy`: its acting distribution (greedy unless `explore`).

    Args:
      policy: the `TrainedPolicy`.
      explore: its distribution (True) or its greedy actions.
    """
    acting = policy.acting
    if acting is None or acting.is_stateful:
        raise OPEError(f"off-policy evaluation needs a feed-forward acting policy; "
                       f"{policy.algo_name}'s is recurrent or absent")
    return from_acting(acting.act, acting.dist, policy.params, policy.spaces.action, explore,
                       takes_key=acting.takes_key, seed=policy.seed)


@functools.lru_cache(maxsize=16)
def _jitted(rows: Connector) -> Any:
    """The rows pipeline's jitted apply, kept per pipeline: a run's next evaluation reuses
    the compiled program."""
    return jax.jit(rows.apply)


def policy_columns(policy: Any, episodes: Sequence[Episode]) -> tuple[dict, list[int], Any]:
    """The OPE columns of `episodes` (see the module docstring), rows in episode order
    (by length), each episode's length, and the observation spec FQE's network reads.

    Args:
      policy: the `TrainedPolicy` (its pipelines make the columns).
      episodes: the logged episodes.
    """
    if not episodes:
        raise EmptyEvaluationSplitError("no episodes to evaluate on")
    wanted = COLUMNS + ((LOGP,) if has_logp(episodes) else ())
    rows = policy.pipelines.rows
    if rows is None:
        raise OPEError(f"{policy.algo_name}'s pipelines name no rows pipeline")
    cols, _, lengths = episode_rows(_jitted(rows), list(episodes), policy.rows_state(),
                                    wanted, what="off-policy evaluation")
    if lengths is None:
        raise OPEError(f"{policy.algo_name}'s learner pipeline does not keep one block of "
                       "rows per episode; off-policy evaluation needs whole episodes")
    return jax.device_get(cols), lengths, rows.out_spaces(policy.spaces).observation


def evaluate_policy(policy: Any, episodes: Sequence[Episode], methods: dict[str, Method],
                    *, gamma: float | None = None, explore: bool = True,
                    num_bootstrap: int = 200, confidence: float = 0.95,
                    seed: int | None = None) -> dict:
    """`{name: estimates}` of a `TrainedPolicy` on `episodes` (see `ope.run.run`).

    The episodes go through the front of the policy's learner pipeline (its observation
    filters, as in training), so the policy sees what it was trained on.

    Args:
      policy: the `TrainedPolicy` to evaluate.
      episodes: the logged episodes.
      methods: name -> `Method` (`parse_methods`' output).
      gamma: the discount (default: the policy's config's).
      explore: evaluate the action distribution (True) or the greedy actions.
      num_bootstrap: bootstrap resamples for the interval on `v_target`.
      confidence: the interval's confidence level.
      seed: the bootstrap's and FQE's seed (default: the policy's config's).

    Returns:
      `{method name: estimates}` (`ope.estimators.summarize`).

    Raises:
      EmptyEvaluationSplitError: no episodes.
      MissingActionLogpError: an importance-sampling method on episodes without the
        behaviour's `action_logp`.
      ActionSpaceMismatchError: the data's actions are not of the policy's action space.
      OPEError: importance weights asked of a deterministic Box target (no density).
    """
    if not episodes:
        raise EmptyEvaluationSplitError("no episodes to evaluate on")
    target = policy_target(policy, explore)
    check_inputs(methods, {LOGP: None} if has_logp(episodes) else {}, target,
                 data_action_space(episodes, policy.spaces.action))
    columns, lengths, obs_spec = policy_columns(policy, episodes)
    return run(methods, columns, lengths, target, obs_spec, policy.spaces.action,
               policy.gamma if gamma is None else gamma, num_bootstrap=num_bootstrap,
               confidence=confidence, seed=policy.seed if seed is None else seed)
