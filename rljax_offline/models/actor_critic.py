"""RLlib's actor-critic module with separate networks (`vf_share_layers=False`): a policy and a
value network, each with its own encoder and, when recurrent, its own cell; one state
`{"actor": .., "critic": ..}` (RLlib's `ActorCriticEncoder` keys) and params
`{"policy": .., "value": ..}`. Recurrent PPO acts and learns with it; export reads which part of
its state acting carries (`acting_state`, `with_critic_state`)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline.models.module import Module, policy_module

ACTOR, CRITIC = "actor", "critic"  # RLlib's keys of an actor-critic module's state


def init_policy_and_value(policy: Module, value: Module):
    """`rng -> {"policy": .., "value": ..}`: the params, each network from its own key."""

    def init(rng):
        k1, k2 = jax.random.split(rng)
        return {"policy": policy.init(k1), "value": value.init(k2)}

    return init


def actor_critic_module(policy: Module, value: Module) -> Module:
    """The recurrent actor-critic `Module` of `policy` and `value`: acting runs both cells,
    so the recorded `state_out` holds the critic's state too and the learner unrolls `V` from
    it, as RLlib's `compute_values` reads `state_in["critic"]`. Its outputs are the policy's
    `action_dist_inputs`."""

    def forward(params, batch):
        state = batch["state_in"]
        out, actor_state = policy.forward(params["policy"], {**batch, "state_in": state[ACTOR]})
        _, critic_state = value.forward(params["value"], {**batch, "state_in": state[CRITIC]})
        return out, {ACTOR: actor_state, CRITIC: critic_state}

    def initial_state(batch_size=None):
        return {ACTOR: policy.initial_state(batch_size),
                CRITIC: value.initial_state(batch_size)}

    return policy_module(init_policy_and_value(policy, value), policy.apply, policy.dist,
                         forward=forward, initial_state=initial_state,
                         max_seq_len=policy.max_seq_len, obs_spec=policy.obs_spec,
                         act_spec=policy.act_spec)


def is_actor_critic(module: Module) -> bool:
    """Whether `module`'s state is an actor-critic module's `{"actor": .., "critic": ..}`."""
    if not module.is_stateful:
        return False
    state = module.initial_state()
    return isinstance(state, dict) and set(state) == {ACTOR, CRITIC}


def acting_state(module: Module, state: Any) -> Any:
    """The part of `module`'s state that acting needs from step to step: an actor-critic
    module's actor part (the critic's cell only feeds the learner), else all of it."""
    return state[ACTOR] if is_actor_critic(module) else state


def with_critic_state(module: Module, state: Any, batch_size: int) -> Any:
    """`module`'s whole state from its acting part (`acting_state`): an actor-critic
    module's critic gets its initial state, `[batch_size, ...]`."""
    if not is_actor_critic(module):
        return state
    critic = jax.tree_util.tree_map(
        lambda x: jnp.broadcast_to(jnp.asarray(x), (batch_size, *np.shape(x))),
        module.initial_state()[CRITIC])
    return {ACTOR: state, CRITIC: critic}
