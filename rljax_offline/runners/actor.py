"""A pure on-device actor (in the spirit of Acme's `ActorCore`): `init`, `select_action`,
`observe` are pure jitted functions of an `ActorState` that holds, on the device, each env's
lookback window (the last K observations, actions, rewards, `state_out`s) and its step count.

Per step the host only moves the env's arrays: no `EpisodeBuilder` windows, no
`EpisodeBatch.from_episodes`, no Python per env. The env-to-module pipeline runs on an
`EpisodeBatch` view of the window (length 0, lookback K), so every piece sees what it sees in
`ConnectorPolicy`, and a recurrent policy's `state_out` rides in the window as RLlib's episodes
hold it.

    actor = make_actor(policy, spaces, env_to_module, module_to_env)
    state = actor.init(first_obs)                       # [N, ...] reset observations
    actions, extras, state = actor.select_action(params, state, rng)
    state = actor.observe(state, extras, rewards, next_obs, dones)    # dones: env was reset
    # or, one device call a step: observe the last step and select the next action
    actions, extras, state = actor.observe_and_select(params, state, extras, rewards,
                                                      next_obs, dones, rng)

`observe` expects the next observation of each env to be its reset observation where `dones`
is True (gymnasium's SAME_STEP autoreset).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.batch import EpisodeBatch
from rljax_offline.connectors.common import expand
from rljax_offline.connectors.core import Connector, Context, Spaces


class ActorState(NamedTuple):
    observations: Any      # [N, K + 1, ...]: the window, the current observation last
    actions: Any           # [N, K, ...]
    rewards: jax.Array     # [N, K]
    state_outs: Any        # [N, K, ...] pytree (recurrent policies), else ()
    lookback_lengths: jax.Array  # [N]: real steps in the window (<= K)
    t: jax.Array           # [N]: steps since each env's reset
    pipeline_state: Any


class Actor(NamedTuple):
    init: Any
    select_action: Any
    observe: Any
    observe_and_select: Any  # both in one device call: the per-step hot path
    window: int


def make_actor(policy, spaces: Spaces, env_to_module: Connector, module_to_env: Connector, *,
               env_to_module_state: Any = None, lookback: int = 0, explore: bool = False,
               update_env_to_module: bool = False) -> Actor:
    """The actor for `policy` between the two pipelines. Their states are fixed (`frozen`)
    unless `update_env_to_module`: then stateful env-to-module pieces (the mean-std filter)
    learn from each observation as RLlib's env runners do, and `ActorState.pipeline_state`
    carries their state. The window is `max(lookback, env_to_module.lookback)` steps (at
    least 1 for a recurrent policy, whose latest `state_out` it holds)."""
    K = max(int(lookback), env_to_module.lookback, 1 if policy.is_stateful else 0)
    e2m_state = env_to_module.init(spaces) if env_to_module_state is None \
        else env_to_module_state
    m2e_state = module_to_env.init(env_to_module.out_spaces(spaces))
    if isinstance(spaces.action, (sp.TupleSpec, sp.DictSpec)) or spaces.action is None:
        raise ValueError(f"make_actor needs a Discrete, MultiDiscrete, MultiBinary or Box "
                         f"action space, got {spaces.action}")
    act_shape = tuple(spaces.action.shape)
    act_dtype = jax.dtypes.canonicalize_dtype(np.dtype(spaces.action.dtype))

    def init(first_obs) -> ActorState:
        first_obs = jnp.asarray(first_obs)
        n = first_obs.shape[0]
        obs = jnp.zeros((n, K + 1, *first_obs.shape[1:]), first_obs.dtype).at[:, K].set(
            first_obs)
        states = () if not policy.is_stateful else jax.tree_util.tree_map(
            lambda x: jnp.zeros((n, K, *x.shape), x.dtype), policy.initial_state())
        return ActorState(obs, jnp.zeros((n, K, *act_shape), act_dtype),
                          jnp.zeros((n, K), jnp.float32), states, jnp.zeros(n, jnp.int32),
                          jnp.zeros(n, jnp.int32), e2m_state)

    def view(state: ActorState) -> EpisodeBatch:
        n = state.t.shape[0]
        emo = {"state_out": state.state_outs} if policy.is_stateful else {}
        return EpisodeBatch(
            observations=state.observations, actions=state.actions, rewards=state.rewards,
            extra_model_outputs=emo, lengths=jnp.zeros(n, jnp.int32),
            lookback_lengths=state.lookback_lengths, t_started=state.t,
            terminated=jnp.zeros(n, bool), truncated=jnp.zeros(n, bool), max_len=0,
            len_lookback_buffer=K, observation_space_spec=spaces.observation,
            action_space_spec=spaces.action)

    def select_action(params, state: ActorState, rng):
        ctx = Context(rng=rng, explore=explore, params=params, frozen=not update_env_to_module)
        episodes, batch, e2m_new = env_to_module.apply(state.pipeline_state, view(state), {},
                                                       ctx)
        if update_env_to_module:
            state = state._replace(pipeline_state=e2m_new)
        extras = {}
        if policy.is_stateful:
            dist_inputs, extras["state_out"] = policy.forward(params, batch)
            dist_inputs = dist_inputs[:, 0]
        else:
            dist_inputs = policy.apply(params, batch["obs"])
        batch = {**batch, "action_dist_inputs": dist_inputs}
        _, batch, _ = module_to_env.apply(m2e_state, episodes, batch, ctx)
        extras = {"actions": batch["actions"], "action_logp": batch["action_logp"], **extras}
        return batch["actions_for_env"], extras, state

    def observe(state: ActorState, extras, rewards, next_obs, dones) -> ActorState:
        """Shifts each env's window by the step just taken; a done env starts afresh from
        `next_obs` (its reset observation)."""
        dones = jnp.asarray(dones, bool)

        def push(window, item):
            item = jnp.asarray(item, window.dtype)
            return jnp.concatenate([window[:, 1:], item[:, None]], axis=1)

        obs = push(state.observations, next_obs)
        if K == 0:
            acts, rews, outs = state.actions, state.rewards, state.state_outs
        else:
            acts = push(state.actions, extras["actions"].reshape(state.actions.shape[0],
                                                                 *state.actions.shape[2:]))
            rews = push(state.rewards, rewards)
            outs = state.state_outs if not policy.is_stateful else jax.tree_util.tree_map(
                push, state.state_outs, extras["state_out"])
        lb = jnp.where(dones, 0, jnp.minimum(state.lookback_lengths + 1, K))
        t = jnp.where(dones, 0, state.t + 1)
        zero_old = jax.tree_util.tree_map(  # a fresh episode sees zeros before its reset
            lambda w: jnp.where(expand(dones, w) & (jnp.arange(w.shape[1]) < w.shape[1] - 1
                                                    ).reshape(1, -1, *([1] * (w.ndim - 2))),
                                jnp.zeros((), w.dtype), w), obs)
        return ActorState(zero_old, acts, rews, outs, lb.astype(jnp.int32),
                          t.astype(jnp.int32), state.pipeline_state)

    def observe_and_select(params, state, extras, rewards, next_obs, dones, rng):
        return select_action(params, observe(state, extras, rewards, next_obs, dones), rng)

    return Actor(init=jax.jit(init), select_action=jax.jit(select_action),
                 observe=jax.jit(observe), observe_and_select=jax.jit(observe_and_select),
                 window=K)
