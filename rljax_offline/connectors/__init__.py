"""Connector pipelines as pure, jit-compatible functions over `EpisodeBatch`es."""

from rljax_offline.connectors.columns import (
                                              add_columns,
                                              add_next_observations,
                                              add_observations,
                                              clip_rewards,
                                              prev_actions_rewards,
)
from rljax_offline.connectors.core import Connector, Context, Spaces, pipeline, stateless
from rljax_offline.connectors.defaults import (
                                              default_env_to_module,
                                              default_learner,
                                              default_module_to_env,
)
from rljax_offline.connectors.module_to_env import clip_actions, get_actions, module_outputs
from rljax_offline.connectors.observations import (
                                              RunningStats,
                                              flatten_observations,
                                              frame_stack,
                                              mean_std_filter,
                                              one_hot_observations,
)
from rljax_offline.connectors.sequences import (
                                              add_states,
                                              add_time_dim,
                                              count_based_intrinsic_reward,
)

__all__ = [
    "Connector",
    "Context",
    "RunningStats",
    "Spaces",
    "add_columns",
    "add_next_observations",
    "add_observations",
    "add_states",
    "add_time_dim",
    "clip_actions",
    "clip_rewards",
    "count_based_intrinsic_reward",
    "default_env_to_module",
    "default_learner",
    "default_module_to_env",
    "flatten_observations",
    "frame_stack",
    "get_actions",
    "mean_std_filter",
    "module_outputs",
    "one_hot_observations",
    "pipeline",
    "prev_actions_rewards",
    "stateless",
]
