"""RLlib's names for result keys and checkpoint components, so code written against RLlib
(`ray.rllib.utils.metrics`, `ray.rllib.core`) runs with its imports swapped.

Result keys: `algo.train()` and `algo.evaluate()` return nested dicts under these names, e.g.
`result[EVALUATION_RESULTS][ENV_RUNNER_RESULTS][EPISODE_RETURN_MEAN]`, and the stop metric of
RLlib's guides, `f"{EVALUATION_RESULTS}/{ENV_RUNNER_RESULTS}/{EPISODE_RETURN_MEAN}"`, reads
the same value through `rljax_offline.apps.training_loop.result_value`.

Components: `Algorithm.restore_from_path(path, component=...)` loads one part of a
checkpoint: the RL module (the network weights), the learner (weights, optimizer states and
the learner connector's fitted state), or a connector pipeline's fitted state.
"""

from __future__ import annotations

# ---------------------------------------------------------------- result keys (metrics)
ENV_RUNNER_RESULTS = "env_runners"
EVALUATION_RESULTS = "evaluation"
LEARNER_RESULTS = "learners"
EPISODE_RETURN_MEAN = "episode_return_mean"
EPISODE_RETURN_MIN = "episode_return_min"
EPISODE_RETURN_MAX = "episode_return_max"
EPISODE_LEN_MEAN = "episode_len_mean"
NUM_EPISODES = "num_episodes"
NUM_ENV_STEPS_SAMPLED = "num_env_steps_sampled"
NUM_ENV_STEPS_SAMPLED_LIFETIME = "num_env_steps_sampled_lifetime"
NUM_ENV_STEPS_TRAINED = "num_env_steps_trained"
NUM_ENV_STEPS_TRAINED_LIFETIME = "num_env_steps_trained_lifetime"
NUM_MODULE_STEPS_TRAINED = "num_module_steps_trained"
ALL_MODULES = "__all_modules__"
TRAINING_ITERATION = "training_iteration"
OFF_POLICY_ESTIMATOR = "off_policy_estimator"

# ---------------------------------------------------------------- checkpoint components
DEFAULT_MODULE_ID = "default_policy"
COMPONENT_LEARNER_GROUP = "learner_group"
COMPONENT_LEARNER = "learner"
COMPONENT_RL_MODULE = "rl_module"
COMPONENT_ENV_RUNNER = "env_runner"
COMPONENT_ENV_TO_MODULE_CONNECTOR = "env_to_module_connector"
COMPONENT_MODULE_TO_ENV_CONNECTOR = "module_to_env_connector"
COMPONENT_LEARNER_CONNECTOR = "learner_connector"
