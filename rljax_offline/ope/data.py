"""The data OPE reads: whole episodes, held out by episode, as rows in episode order.

* `held_out(episode, share, seed)`: whether an episode belongs to the evaluation share, a pure
  function of its id and the seed (crc32), so the split is the same in every process and on
  every read, and never cuts an episode;
* `raw_columns(episodes)`: the columns OPE reads, straight from the episodes (a policy
  function reads raw observations); an algorithm's target reads its learner pipeline's
  columns instead (`ope.evaluation`);
* `pad(values, lengths)`: rows in episode order -> `[E, T]`, zero padded.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from typing import Any

import gymnasium as gym
import jax
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.episode.episode import Episode
from rljax_offline.errors import EmptyEvaluationSplitError

LOGP = "action_logp"


def held_out(episode: Episode, share: float, seed: int) -> bool:
    """True for the episodes of the evaluation share (about `share` of them).

    Args:
      episode: the episode (its `id_` decides).
      share: the evaluation share.
      seed: changes which episodes are held out.
    """
    if share <= 0.0:
        return False
    h = zlib.crc32(f"{seed}:{episode.id_}".encode()) / 2**32
    return h < share


def split(episodes: Iterable[Episode], share: float, seed: int
          ) -> tuple[list[Episode], list[Episode]]:
    """`(train, evaluation)` episodes: about `share` of them held out for evaluation.

    Each episode's side is a hash of `seed` and its id, so the split is the same in every
    process and run, whatever the order the episodes are read in (`evaluation(ope_split=)`
    trains on one side and estimates on the other).

    Args:
      episodes: the episodes to split.
      share: the fraction to hold out, in [0, 1] (0: all train).
      seed: changes which episodes are held out.

    Returns:
      `(train, evaluation)` lists, each in the input order.

    Raises:
      EmptyEvaluationSplitError: `share > 0` and no episode was held out.
    """
    train, held = [], []
    for ep in episodes:
        (held if held_out(ep, share, seed) else train).append(ep)
    if share > 0.0 and not held:
        raise EmptyEvaluationSplitError(
            f"evaluation(ope_split={share}) held out no episode of {len(train)} (seed "
            f"{seed}); raise ope_split or record more episodes")
    return train, held


def has_logp(episodes: Sequence[Episode]) -> bool:
    """Whether every episode records the behaviour's `action_logp`.

    Args:
      episodes: the episodes.
    """
    return bool(episodes) and all(LOGP in ep.extra_model_outputs for ep in episodes)


def data_action_space(episodes: Sequence[Episode], expected: Any) -> Any:
    """The data's action space as far as OPE's checks go: `expected` where the recorded
    actions fit its kind (integers for Discrete, floats of its shape for Box), else a space
    of the data's own kind (which the target then does not match).

    Args:
      episodes: the episodes.
      expected: the action space the target acts in.
    """
    actions = np.asarray(episodes[0].get_actions())
    integer = np.issubdtype(actions.dtype, np.integer)
    expected = sp.to_spec(expected)
    if isinstance(expected, sp.DiscreteSpec) and integer and actions.ndim == 1:
        return expected
    if isinstance(expected, sp.BoxSpec) and not integer:
        return expected
    if integer and actions.ndim == 1:
        return gym.spaces.Discrete(int(actions.max(initial=0)) + 1)
    return gym.spaces.Box(-np.inf, np.inf, actions.shape[1:], np.float32)


def raw_columns(episodes: Sequence[Episode]) -> tuple[dict, list[int]]:
    """`obs`, `actions`, `rewards`, `new_obs`, `terminateds` (and `action_logp` when every
    episode has it) of the episodes' steps in order, and each episode's length.

    Args:
      episodes: the episodes.
    """
    if not episodes:
        raise EmptyEvaluationSplitError("no episodes to evaluate on")
    logp = has_logp(episodes)
    cols: dict[str, list] = {k: [] for k in ("obs", "actions", "rewards", "new_obs",
                                             "terminateds", *((LOGP,) if logp else ()))}
    lengths = []
    for ep in episodes:
        n = len(ep)
        obs = ep.get_observations()
        cols["obs"].append(jax.tree_util.tree_map(lambda x, n=n: np.asarray(x)[:n], obs))
        cols["new_obs"].append(jax.tree_util.tree_map(lambda x, n=n: np.asarray(x)[1:n + 1],
                                                      obs))
        cols["actions"].append(np.asarray(ep.get_actions()))
        cols["rewards"].append(np.asarray(ep.get_rewards(), np.float32))
        term = np.zeros(n, np.float32)
        term[-1:] = float(ep.is_terminated)
        cols["terminateds"].append(term)
        if logp:
            cols[LOGP].append(np.asarray(ep.get_extra_model_outputs(LOGP), np.float64))
        lengths.append(n)
    out = {k: jax.tree_util.tree_map(lambda *xs: np.concatenate(xs), *v)
           for k, v in cols.items()}
    return out, lengths


def pad(values: np.ndarray, lengths: Sequence[int]) -> np.ndarray:
    """Rows in episode order `[sum(lengths)]` -> `[E, max(lengths)]`, zeros after each end.

    Args:
      values: rows in episode order.
      lengths: each episode's number of rows.
    """
    lengths = np.asarray(lengths, np.int64)
    out = np.zeros((len(lengths), int(lengths.max(initial=0))), np.float64)
    mask = np.arange(out.shape[1])[None, :] < lengths[:, None]
    out[mask] = np.asarray(values, np.float64).reshape(-1)
    return out
