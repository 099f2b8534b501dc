"""OPE of an algorithm's current policy: its target policy (the acting module and params),
the OPE columns of episodes through its own learner pipeline (so connector pieces, a fitted
mean-std filter or TD3+BC's normalization, apply as they do in training), and the run.

The target is the policy's action distribution (RLlib's OPE evaluated its policy's action
probabilities), `explore=False` its greedy actions. Recurrent policies are not supported.
Used by `Algorithm.train()` (the held-out `ope_split` episodes) and `ope.estimate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

from rljax_offline.episode.episode import Episode
from rljax_offline.errors import EmptyEvaluationSplitError, OPEError
from rljax_offline.ope.data import LOGP, data_action_space, has_logp
from rljax_offline.ope.methods import Method
from rljax_offline.ope.run import check_inputs, run
from rljax_offline.ope.target import TargetPolicy, from_acting

COLUMNS = ("obs", "actions", "rewards", "new_obs", "terminateds")


def algorithm_target(algo: Any, explore: bool = True) -> TargetPolicy:
    """The policy `algo` (an `Algorithm`) acts with, with its current params."""
    acting = algo.spec.acting
    if acting is None or acting.is_stateful:
        raise OPEError(f"off-policy evaluation needs a feed-forward acting policy; "
                       f"{algo.algo_name}'s is recurrent or absent")
    params = jax.device_get(algo.state.params)
    return from_acting(acting.act, acting.dist, params, algo.spaces.action, explore)


def algorithm_columns(algo: Any, episodes: Sequence[Episode]) -> tuple[dict, list[int]]:
    """The OPE columns of `episodes` through `algo`'s learner pipeline (fitted state frozen),
    rows in episode order, and each episode's length."""
    if not episodes:
        raise EmptyEvaluationSplitError("no episodes to evaluate on")
    wanted = COLUMNS + ((LOGP,) if has_logp(episodes) else ())
    cstate = jax.device_get(algo.state.connector_state)
    cols, _, lengths = algo.data.columns(list(episodes), cstate, fit=False, columns=wanted)
    if lengths is None:
        raise OPEError(f"{algo.algo_name}'s learner pipeline does not keep one block of rows "
                       "per episode; off-policy evaluation needs whole episodes")
    return jax.device_get(cols), lengths


def evaluate_algorithm(algo: Any, episodes: Sequence[Episode], methods: dict[str, Method],
                       *, gamma: float | None = None, explore: bool = True,
                       num_bootstrap: int = 200, confidence: float = 0.95) -> dict:
    """`{name: estimates}` of `algo`'s policy on `episodes` (see `ope.run.run`)."""
    if not episodes:
        raise EmptyEvaluationSplitError("no episodes to evaluate on")
    target = algorithm_target(algo, explore)
    check_inputs(methods, {LOGP: None} if has_logp(episodes) else {}, target,
                 data_action_space(episodes, algo.spaces.action))
    columns, lengths = algorithm_columns(algo, episodes)
    obs_spec = algo.learner_connector.out_spaces(algo.spaces).observation
    return run(methods, columns, lengths, target, obs_spec,
               algo.spaces.action, algo.config.gamma if gamma is None else gamma,
               num_bootstrap=num_bootstrap, confidence=confidence, seed=algo.config.seed)
