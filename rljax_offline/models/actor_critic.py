"""RLlib's actor-critic modules: params `{"policy": .., "value": ..}`.

* `critic`: `V(s)` as PPO and MARWIL read it, over the whole params. Separate networks
  (`vf_share_layers=False`): the value network on `params["value"]`. Shared layers
  (`vf_share_layers=True`, RLlib's new-stack default): one encoder, the policy's trunk (its
  `fcnet_hiddens` layers, or its CNN), with a linear value head in `params["value"]`; the value
  loss then trains the shared encoder too. `params["policy"]` has the same shapes either way,
  so acting, export and cloning into BC read one layout.
* `actor_critic_module`: the recurrent module with separate networks: a policy and a value
  network each with its own encoder and cell; one state `{"actor": .., "critic": ..}`
  (RLlib's `ActorCriticEncoder` keys). Recurrent PPO acts and learns with it; export reads
  which part of its state acting carries (`acting_state`, `with_critic_state`)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.models import cnn, recurrent
from rljax_offline.models.encoders import MLPEncoder, encode_observations, layernorm_mode
from rljax_offline.models.initializers import layer_inits
from rljax_offline.models.model_config import check_model_config
from rljax_offline.models.module import Module, policy_module
from rljax_offline.models.networks import value_network
from rljax_offline.models.policy import MLP, observation_encoder

ACTOR, CRITIC = "actor", "critic"  # RLlib's keys of an actor-critic module's state


def init_policy_and_value(policy: Module, value: Module):
    """`rng -> {"policy": .., "value": ..}`: the params, each network from its own key."""

    def init(rng):
        k1, k2 = jax.random.split(rng)
        return {"policy": policy.init(k1), "value": value.init(k2)}

    return init


def critic(obs_spec: Any, model_config: dict | None) -> Module:
    """`V(s)` of an actor-critic (see the module docstring).

    Args:
        obs_spec: the observation space (or its spec) the policy takes.
        model_config: RLlib's model-config keys; `vf_share_layers` picks the layout.

    Returns:
        A `Module` whose `init(rng)` makes `params["value"]` and whose `apply`, `steps`,
        `head` (and a recurrent value network's `forward`) take the whole params
        `{"policy": .., "value": ..}`.
    """
    cfg = check_model_config(dict(model_config or {}))
    if not cfg["vf_share_layers"]:
        return _on_part(value_network(obs_spec, cfg), "value")
    return _shared_value(sp.to_spec(obs_spec), cfg)


def _on_part(network: Module, key: str) -> Module:
    """`network` reading `params[key]` of the whole params."""
    forward = None if network.forward is None else (
        lambda params, batch: network.forward(params[key], batch))
    return network._replace(
        apply=lambda params, *args: network.apply(params[key], *args),
        steps=lambda params, batch, with_next=False, state_in=None: network.steps(
            params[key], batch, with_next, state_in),
        head=lambda params, rows, *args: network.head(params[key], rows, *args),
        forward=forward)


def _shared_value(obs_spec: Any, cfg: dict) -> Module:
    """A linear value head on the policy's trunk: the policy network's hidden layers (its
    `Dense_0 .. Dense_{k-1}`; `Dense_k` is its output layer) or its CNN (`encoder`)."""
    encoder, obs_shape, obs_dtype = observation_encoder(obs_spec, cfg)
    image = isinstance(obs_spec, sp.BoxSpec) and cnn.is_image(obs_spec.shape)
    if image:
        trunk = encoder
        prepare = jnp.asarray

        def trunk_params(policy_params):
            return {"params": policy_params["params"]["encoder"]}
    else:
        hiddens = tuple(int(h) for h in cfg["fcnet_hiddens"])
        trunk = MLPEncoder(hiddens, cfg["fcnet_activation"], layer_inits(cfg),
                           layernorm_mode(cfg))
        output_layer = f"Dense_{len(hiddens)}"

        def prepare(obs):
            return encode_observations(obs_spec, jnp.asarray(obs))

        def trunk_params(policy_params):
            return {"params": {k: v for k, v in policy_params["params"].items()
                               if k != output_layer}}

    dummy = np.zeros((1, *obs_shape), obs_dtype)
    features_dim = jax.eval_shape(
        lambda: trunk.init_with_output(jax.random.key(0), prepare(dummy))[0]).shape[-1]
    head_net = MLP((), cfg["fcnet_activation"], 1, 1.0, layer_inits(cfg))

    def features(params, obs):
        return trunk.apply(trunk_params(params["policy"]), prepare(obs))

    def head(params, rows, *args):
        return head_net.apply(params["value"], rows)[:, 0]

    def steps(params, batch, with_next=False, state_in=None):
        return recurrent.step_outputs(features, None, params, batch, None, with_next)

    return Module(init=lambda rng: head_net.init(rng, np.zeros((1, features_dim), np.float32)),
                  apply=lambda params, obs: head(params, features(params, obs)),
                  steps=steps, head=head)


def actor_critic_module(policy: Module, value: Module) -> Module:
    """The recurrent actor-critic `Module` of `policy` and `value` (a `critic`: it reads the
    whole params): acting runs both cells,
    so the recorded `state_out` holds the critic's state too and the learner unrolls `V` from
    it, as RLlib's `compute_values` reads `state_in["critic"]`. Its outputs are the policy's
    `action_dist_inputs`."""

    def forward(params, batch):
        state = batch["state_in"]
        out, actor_state = policy.forward(params["policy"], {**batch, "state_in": state[ACTOR]})
        _, critic_state = value.forward(params, {**batch, "state_in": state[CRITIC]})
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
