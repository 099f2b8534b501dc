"""The function an export compiles: one greedy step of the actor (`acting.actor.make_actor`),
its window built by the actor from the step's inputs (`Actor.state_at`), and what that step
reads (`StepLayout`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rljax_offline.acting.actor import make_actor
from rljax_offline.acting.window import window_reads
from rljax_offline.connectors.core import Connector, Spaces
from rljax_offline.errors import ExportError
from rljax_offline.models.actor_critic import acting_state, with_critic_state


class PolicyParts(NamedTuple):
    """What every algorithm has and an exported policy needs.

    Attributes:
      module: the acting `Module` (`models.module`; an algorithm's `acting_module`):
        `apply(params, obs)`; a recurrent one also `forward(params, batch)` and
        `initial_state()`.
      params: the module's parameters.
      env_to_module: the env-to-module pipeline.
      env_to_module_state: its fitted state.
      module_to_env: the module-to-env pipeline (its state is initialised from the spaces).
      spaces: the env's observation and action spaces (`Spaces` of specs).
      lookback: past steps the actor keeps at least (`episode_lookback_horizon`).
    """

    module: Any
    params: Any
    env_to_module: Connector
    env_to_module_state: Any
    module_to_env: Connector
    spaces: Spaces
    lookback: int = 0


def policy_parts(policy: Any) -> PolicyParts:
    """The `PolicyParts` of a `learning.trained_policy.TrainedPolicy` (what `export_policy`
    takes): its acting module and params, its pipelines and their fitted state.

    Args:
      policy: the trained policy (`Algorithm.policy()`, `load_policy(path)`).
    """
    return PolicyParts(policy.module, policy.params, policy.pipelines.env_to_module,
                       policy.env_to_module_state(), policy.pipelines.module_to_env,
                       policy.spaces, policy.lookback)


class StepLayout(NamedTuple):
    """What an exported step reads besides the latest observation.

    Attributes:
      observation_lookback: past observations: `obs` is `[B, lookback + 1, ...]` when > 0.
      prev_actions: whether it reads the previous action.
      prev_rewards: whether it reads the previous reward.
      stateful: whether it carries a recurrent state.
    """

    observation_lookback: int  # past observations: `obs` is `[B, lookback + 1, ...]` when > 0
    prev_actions: bool
    prev_rewards: bool
    stateful: bool

    @property
    def takes_dict(self) -> bool:
        """Whether the step takes the `inputs` dict (anything carried between steps)."""
        return bool(self.observation_lookback or self.prev_actions or self.prev_rewards
                    or self.stateful)


def step_layout(parts: PolicyParts) -> StepLayout:
    """What the actor reads of its window (`acting.window.window_reads`), of which the
    exported step takes only the previous action / reward.

    Args:
      parts: the policy to export.

    Raises:
      ExportError: the pipeline reads more past actions than the previous one.
    """
    reads = window_reads(parts.env_to_module, parts.spaces, parts.lookback,
                         parts.module.is_stateful)
    if reads.prev_steps > 1:
        raise ExportError(f"the env-to-module pipeline reads the last {reads.prev_steps} "
                          "actions/rewards (prev_actions_rewards); the exported step takes "
                          "only the previous one (n_prev_actions = n_prev_rewards = 1)")
    return StepLayout(reads.observation_lookback, reads.prev_actions, reads.prev_rewards,
                      reads.stateful)


def step_state(module: Any) -> Any:
    """The initial state of what the exported step carries (per item, no batch axis): the
    acting part of the module's state (`models.actor_critic.acting_state`)."""
    return acting_state(module, module.initial_state())


def _host(tree: Any) -> Any:
    return jax.tree_util.tree_map(jnp.asarray, jax.device_get(tree))


def greedy_policy_fn(parts: PolicyParts) -> Callable:
    """The function that gets exported: one greedy step of the actor, the pipelines' states
    and the params closed over as constants. `act(obs)` for a policy of the latest
    observation, else `step(inputs)` (see the package docstring); both return
    `(actions, action_dist_inputs)`, and a recurrent one also the state after the step (an
    actor-critic module's actor part: its critic gets the initial state and, its output
    unused, is dead code in the graph).

    Args:
      parts: the policy to export.
    """
    layout = step_layout(parts)
    module = parts.module
    params, e2m_state = _host(parts.params), _host(parts.env_to_module_state)
    actor = make_actor(module, parts.spaces, parts.env_to_module, parts.module_to_env,
                       env_to_module_state=e2m_state, lookback=parts.lookback, explore=False)

    def act_on(inputs: dict):
        obs = inputs["obs"]
        n = jax.tree_util.tree_leaves(obs)[0].shape[0]
        state = with_critic_state(module, inputs["state"], n) if layout.stateful else None
        window = actor.state_at(obs, inputs.get("t"), inputs.get("prev_actions"),
                                inputs.get("prev_rewards"), state,
                                obs_lookback=layout.observation_lookback)
        actions, extras, _ = actor.select_action(params, window)
        out = (actions, extras["action_dist_inputs"])
        if not layout.stateful:
            return out
        return (*out, acting_state(module, extras["state_out"]))

    if not layout.takes_dict:
        return lambda obs: act_on({"obs": obs})
    return act_on
