"""A trained module as a policy of `MultiAgentEnvRunner`: `(obs [N, ...], key) -> actions`
(or `(actions, extras)`),
its env-to-module and module-to-env pipelines inlined, compiled once, the params an argument
(so new params after each iteration reuse the program).

Multi-agent acting runs each step on the latest observation of every agent mapped to the
module: pipelines that read past steps (frame stacking, previous actions or rewards) and
recurrent policies need per-agent windows, which this actor does not keep (a named error).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from rljax_offline.acting.actor import make_actor
from rljax_offline.errors import ConfigError

__all__ = ["ModuleActor"]


class ModuleActor:
    """One module's acting for the multi-agent env runner (see the module docstring).

    Args:
      policy: the module's `TrainedPolicy` (its params are replaced with `set_params`).
      module_id: the module's id, for messages.
      explore: sample actions instead of taking the greedy ones.
      outputs: also return the step's `action_logp` and `action_dist_inputs` (what the
        runner records as extra model outputs: an on-policy learner's behaviour policy).
    """

    def __init__(self, policy: Any, module_id: str, explore: bool = False,
                 outputs: bool = False):
        e2m = policy.pipelines.env_to_module
        if policy.is_stateful or max(policy.lookback, e2m.lookback) > 0:
            raise ConfigError(f"module {module_id!r}: multi-agent acting reads each agent's "
                              "latest observation only; recurrent policies and env-to-module "
                              "pieces that read past steps are not supported there yet")
        self.module_id = module_id
        actor = make_actor(policy.module, policy.spaces, e2m, policy.pipelines.module_to_env,
                           env_to_module_state=policy.env_to_module_state(), explore=explore)

        def act(params, obs, key):
            actions, extras, _ = actor.select_action(params, actor.init(obs, key))
            return (actions, extras) if outputs else actions

        self._act = jax.jit(act)
        self.params = policy.params

    def set_params(self, params: Any) -> None:
        """The module's new params (host or device arrays; same shapes: no recompile)."""
        self.params = params

    def __call__(self, obs: Any, key: jax.Array) -> jax.Array:
        return self._act(self.params, obs, key)

    def as_policy(self) -> Callable:
        """The `(obs, key) -> actions` callable the runner takes."""
        return self
