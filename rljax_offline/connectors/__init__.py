"""Connector pipelines as pure, jit-compatible functions over `EpisodeBatch`es.

    pipe = default_learner(spaces, frame_stack(4), mean_std_filter(as_learner_connector=True))
    state = pipe.init(spaces)
    episodes, batch, state = jax.jit(pipe.apply)(state, episode_batch, {}, Context())

`__all__` is what users and algorithm authors may import from here: the `Connector` type and
`pipeline`, every built-in piece, the default pipelines, and the multi-agent mapping (loaded
on first use, with `episode_rows`, which runs a pipeline over episodes into learner rows).
"""

import importlib

from rljax_offline.connectors.common import (
    add_observations,
    add_states,
    add_time_dim,
    frame_stack,
)
from rljax_offline.connectors.core import (
    Connector,
    Context,
    Spaces,
    apply_writing_back,
    named_states,
    pipeline,
    share_states,
    stateless,
)
from rljax_offline.connectors.env_to_module import (
    default_env_to_module,
    flatten_observations,
    model_connectors,
    one_hot_observations,
    prev_actions_rewards,
)
from rljax_offline.connectors.learner import (
    add_columns,
    add_next_actions,
    add_next_observations,
    clip_actions_inside_bounds,
    clip_rewards,
    compact_rows,
    count_based_intrinsic_reward,
    default_learner,
    rllib_dtypes,
)
from rljax_offline.connectors.mean_std import RunningStats, mean_std_filter
from rljax_offline.connectors.module_to_env import (
    clip_actions,
    default_module_to_env,
    get_actions,
    module_outputs,
)
from rljax_offline.connectors.multi_agent_mean_std import mean_std_filter_per_agent
from rljax_offline.connectors.multi_agent_pipelines import (
    MultiAgentPipeline,
    default_multi_agent_env_to_module,
    default_multi_agent_learner,
)
from rljax_offline.connectors.observation_preprocessor import (
    MultiAgentObservationPreprocessor,
    multi_agent_observation_preprocessor,
    single_agent_observation_preprocessor,
)

# public name -> the submodule that defines it, imported on first use
_LAZY = {
    "episode_rows": "rows",
    **{name: "multi_agent" for name in (
        "ModuleBatch", "agent_items", "agent_one_hot", "agent_one_hot_space",
        "agent_to_module_mapping", "apply_per_module", "global_state_column",
        "module_spaces", "module_to_agent_unmapping")},
}

__all__ = [
    "Connector",
    "Context",
    "MultiAgentObservationPreprocessor",
    "MultiAgentPipeline",
    "RunningStats",
    "Spaces",
    "add_columns",
    "apply_writing_back",
    "add_next_observations",
    "add_observations",
    "add_states",
    "add_time_dim",
    "clip_actions",
    "clip_rewards",
    "compact_rows",
    "count_based_intrinsic_reward",
    "default_env_to_module",
    "default_learner",
    "default_module_to_env",
    "default_multi_agent_env_to_module",
    "default_multi_agent_learner",
    "flatten_observations",
    "frame_stack",
    "get_actions",
    "mean_std_filter",
    "mean_std_filter_per_agent",
    "model_connectors",
    "module_outputs",
    "multi_agent_observation_preprocessor",
    "named_states",
    "one_hot_observations",
    "pipeline",
    "prev_actions_rewards",
    "rllib_dtypes",
    "single_agent_observation_preprocessor",
    "stateless",
    "add_next_actions",
    "clip_actions_inside_bounds",
    "share_states",
    *sorted(_LAZY),
]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
