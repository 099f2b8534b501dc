"""Default pipelines built from the spaces; custom pieces go in front of the defaults, and
`add_default_connectors=False` leaves the defaults out (RLlib's
`add_default_connectors_to_..._pipeline=False`)."""

from __future__ import annotations

from rljax_offline.connectors.columns import add_columns, add_next_observations, add_observations
from rljax_offline.connectors.core import Connector, Spaces, pipeline
from rljax_offline.connectors.module_to_env import clip_actions, get_actions
from rljax_offline.connectors.observations import flatten_observations, needs_flattening
from rljax_offline.connectors.sequences import add_states, add_time_dim


def _obs_defaults(spaces: Spaces, custom) -> list[Connector]:
    """Flattening when the observations (after the custom pieces) are not flat Box vectors."""
    obs = pipeline(*custom).out_spaces(spaces).observation
    return [flatten_observations()] if needs_flattening(obs) else []


def default_env_to_module(spaces: Spaces, *custom: Connector,
                          add_default_connectors: bool = True,
                          max_seq_len: int | None = None) -> Connector:
    """custom pieces -> flatten (if needed) -> `obs` of each episode's latest step; for a
    stateful module (`max_seq_len` set) also `state_in` and a time axis of 1."""
    if not add_default_connectors:
        return pipeline(*custom)
    stateful = [] if max_seq_len is None else [
        add_states(as_learner_connector=False),
        add_time_dim(max_seq_len, as_learner_connector=False)]
    return pipeline(*custom, *_obs_defaults(spaces, custom), add_observations(), *stateful)


def default_learner(spaces: Spaces, *custom: Connector, add_default_connectors: bool = True,
                    max_seq_len: int | None = None) -> Connector:
    """custom pieces -> flatten (if needed) -> `obs`, `actions`, `rewards`, flags, extra model
    outputs, `loss_mask`, `new_obs`, flat `[B * T, ...]`; for a stateful module (`max_seq_len`
    set) then `state_in` per sequence and the time axis, `[B * K, max_seq_len, ...]`."""
    if not add_default_connectors:
        return pipeline(*custom)
    stateful = [] if max_seq_len is None else [add_states(max_seq_len),
                                               add_time_dim(max_seq_len)]
    return pipeline(*custom, *_obs_defaults(spaces, custom),
                    add_observations(as_learner_connector=True), add_columns(),
                    add_next_observations(), *stateful)


def default_module_to_env(spaces: Spaces, *custom: Connector,
                          add_default_connectors: bool = True) -> Connector:
    """custom pieces -> sample/argmax `actions` (+ `action_logp`) -> `actions_for_env`."""
    if not add_default_connectors:
        return pipeline(*custom)
    return pipeline(*custom, get_actions(), clip_actions())
