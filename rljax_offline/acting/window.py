"""What an actor reads of its window besides the latest observation, from the env-to-module
pipeline's declared piece roles (`connectors.core.ROLES`): how many past observations,
whether the previous action / reward, whether the module's state. The window itself is laid
out by `acting.actor.make_actor` (`observe`, `state_at`); export asks this what its step takes."""

from __future__ import annotations

from typing import NamedTuple

from rljax_offline.connectors.core import PREV_ACTIONS_REWARDS, STATES, Connector, Spaces
from rljax_offline.connectors.env_to_module import PREV_ACTIONS_KEY, PREV_REWARDS_KEY


class WindowReads(NamedTuple):
    """What acting reads of the window besides the latest observation.

    Attributes:
      observation_lookback: past observations (frame stacking, the actor's `lookback`).
      prev_actions: the previous action (a `prev_actions_rewards` piece).
      prev_rewards: the previous reward.
      prev_steps: how many past actions / rewards are read (0: none).
      stateful: the module's state after the previous step.
    """

    observation_lookback: int
    prev_actions: bool
    prev_rewards: bool
    prev_steps: int
    stateful: bool


def _leaf_pieces(connector: Connector, spaces: Spaces):
    """`(piece, its input spaces)` for every piece of a (nested) pipeline, in order."""
    if not connector.pieces:
        yield connector, spaces
        return
    for piece in connector.pieces:
        yield from _leaf_pieces(piece, spaces)
        spaces = piece.out_spaces(spaces)


def window_reads(env_to_module: Connector, spaces: Spaces, lookback: int = 0,
                 stateful: bool = False) -> WindowReads:
    """What an actor of `env_to_module` (`make_actor`'s arguments) reads of its window, by
    the pieces' declared roles: a "prev_actions_rewards" piece past actions / rewards, a
    "states" piece the module's state; the lookback of any other piece counts past
    observations.

    Args:
      env_to_module: the env-to-module pipeline.
      spaces: the env's spaces.
      lookback: the actor's `lookback` argument.
      stateful: the module is recurrent.
    """
    obs_lookback, prev_actions, prev_rewards, prev_steps = int(lookback), False, False, 0
    for piece, piece_spaces in _leaf_pieces(env_to_module, spaces):
        if piece.role == STATES:
            continue
        if piece.role != PREV_ACTIONS_REWARDS:
            obs_lookback = max(obs_lookback, int(piece.lookback))
            continue
        prev_steps = max(prev_steps, int(piece.lookback))
        keys = getattr(piece.out_spaces(piece_spaces).observation, "keys", ())
        prev_actions |= PREV_ACTIONS_KEY in keys
        prev_rewards |= PREV_REWARDS_KEY in keys
    return WindowReads(obs_lookback, prev_actions, prev_rewards, prev_steps, bool(stateful))
