"""Acting: env-to-module -> policy -> module-to-env as a pure on-device actor (in the spirit
of Acme's `ActorCore`), and `ActorPolicy`, the object `EnvRunner` drives.

`make_actor` gives pure jitted functions of an `ActorState` that holds, on the device, each
env's lookback window (the last K observations, actions, rewards, `state_out`s), its step
count, the actions just chosen and the RNG key. The env-to-module pipeline runs on an
`EpisodeBatch` view of the window (length 0, lookback K), so every piece sees what it sees on
recorded episodes, and a recurrent policy's `state_out` rides in the window as RLlib's
episodes hold it:

    actor = make_actor(policy, spaces, env_to_module, module_to_env)
    state = actor.init(first_obs, jax.random.PRNGKey(0))     # [N, ...] reset observations
    actions, extras, state = actor.select_action(params, state)
    state = actor.observe(state, rewards, next_obs, fresh)     # fresh: env was just reset
    # or, one device call a step (the hot path):
    actions, extras, state = actor.step(params, state, rewards, next_obs, fresh)

`observe` expects the next observation of an env to be its reset observation where `fresh`
is True. `extras` are what the runner records per step: `action_logp` and
`action_dist_inputs` (with a module-to-env pipeline), `state_out` (recurrent policies).

The window's layout is the actor's alone: `actor.state_at(obs, t, prev_actions, prev_rewards,
state)` builds the state `observe` would hold from what one step of a deployed policy
receives (what `export` compiles into a standalone graph).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.connectors.common import add_observations, expand
from rljax_offline.connectors.core import (
    Connector,
    Context,
    Spaces,
    apply_writing_back,
    pipeline,
)
from rljax_offline.episode.batch import EpisodeBatch

RECORDED_OUTPUTS = ("action_logp", "action_dist_inputs")


class ActorState(NamedTuple):
    """The device-side state of `N` envs' actor: a window of the last `K` steps per env.

    Attributes:
      observations: `[N, K + 1, ...]` pytree: the window, the current observation last.
      actions: `[N, K, ...]` (None when K == 0, as the next two).
      rewards: `[N, K]`.
      state_outs: `[N, K, ...]` pytree of a recurrent policy's outputs, else `()`.
      lookback_lengths: `[N]` real steps in the window (<= K).
      t: `[N]` steps since each env's reset.
      chosen: `(actions [N, ...], state_out or ())`, what `select_action` chose.
      rng: the PRNG key (exploring actors only; else None).
      pipeline_state: the env-to-module pipeline's state.
    """

    observations: Any
    actions: Any
    rewards: jax.Array
    state_outs: Any
    lookback_lengths: jax.Array
    t: jax.Array
    chosen: Any
    rng: jax.Array | None
    pipeline_state: Any


class Actor(NamedTuple):
    """The pure functions of an actor (`make_actor`); each is jit-compatible.

    Attributes:
      init: `(first_obs, rng) -> ActorState` after the envs reset.
      blank: `(first_obs, rng) ->` the state before any observation (host).
      select_action: `(params, state) -> (actions_for_env, extras, state)`.
      observe: `(state, rewards, next_obs, fresh) -> state` after an env step.
      step: `observe` then `select_action`, one device call.
      window: `K`, the past steps the state keeps.
      state_at: `(obs, t, prev_actions, prev_rewards, state, obs_lookback) -> state`, a
        state built from given history (export's stateless entry point).
    """

    init: Callable
    blank: Callable
    select_action: Callable
    observe: Callable
    step: Callable
    window: int
    state_at: Callable


def make_actor(policy, spaces: Spaces, env_to_module: Connector | None = None,
               module_to_env: Connector | None = None, *, env_to_module_state: Any = None,
               lookback: int = 0, explore: bool = False,
               update_env_to_module: bool = False) -> Actor:
    """The actor for `policy` (`apply(params, obs)`, or a recurrent one's `forward` and
    `initial_state`) between the two pipelines. Without `env_to_module` the policy reads the
    latest raw observation; without `module_to_env` its outputs are the actions.

    The pipelines' states are fixed (`frozen`) unless `update_env_to_module`: then stateful
    env-to-module pieces (the mean-std filter) learn from each observation as RLlib's env
    runners do, and `ActorState.pipeline_state` carries their state; the window then keeps
    each observation as the pipeline wrote it back (`connectors.apply_writing_back`), so a
    frame stacking after the filter reads past frames normalized at their own step, as
    RLlib's. The window is
    `max(lookback, env_to_module.lookback)` steps (at least 1 for a recurrent policy, whose
    latest `state_out` it holds).

    Args:
      policy: the policy `Module`.
      spaces: the env's `Spaces`.
      env_to_module: the env-to-module pipeline (None: the latest raw observation).
      module_to_env: the module-to-env pipeline (None: the policy's outputs are the actions).
      env_to_module_state: the env-to-module pipeline's state (default: fresh from `init`).
      lookback: past steps the window keeps, at least the pipeline's `lookback`.
      explore: sample actions (True) or act greedily.
      update_env_to_module: stateful env-to-module pieces learn from each observation.

    Returns:
      The `Actor`.
    """
    env_to_module = env_to_module if env_to_module is not None else pipeline(add_observations())
    stateful = bool(policy.is_stateful)
    K = max(int(lookback), env_to_module.lookback, 1 if stateful else 0)
    e2m_state = env_to_module.init(spaces) if env_to_module_state is None \
        else env_to_module_state
    m2e_state = None if module_to_env is None else module_to_env.init(
        env_to_module.out_spaces(spaces))
    if isinstance(spaces.action, (sp.TupleSpec, sp.DictSpec)) or spaces.action is None:
        raise ValueError(f"acting needs a Discrete, MultiDiscrete, MultiBinary or Box "
                         f"action space, got {spaces.action}")
    act_shape = tuple(spaces.action.shape)
    act_dtype = jax.dtypes.canonicalize_dtype(np.dtype(spaces.action.dtype))
    # With learning statistics the window keeps what the pipeline wrote back (RLlib's live
    # episode); with fixed ones normalizing the raw window again gives the same numbers, and
    # the window stays raw (what the export's inputs are).
    write_back = bool(update_env_to_module and env_to_module.writes_back and K)
    # A policy that draws when it acts (`Module.takes_key`) reads a fresh key every step,
    # greedy or not: the actor keeps an RNG for it as it does for exploring.
    keyed = bool(getattr(policy, "takes_key", False))
    with_rng = explore or keyed

    def blank(first_obs, rng) -> ActorState:
        """The state of `N` envs before their first observation: zeros of the right shapes,
        made with numpy on the host (no device program); `observe` with every env `fresh`
        then puts the reset observations in."""
        n = np.shape(jax.tree_util.tree_leaves(first_obs)[0])[0]
        obs = jax.tree_util.tree_map(
            lambda x: np.zeros((n, K + 1, *np.shape(x)[1:]), jax.dtypes.canonicalize_dtype(
                x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype)), first_obs)
        initial = policy.initial_state() if stateful else ()
        states = jax.tree_util.tree_map(lambda x: np.zeros((n, K, *np.shape(x)), x.dtype),
                                        initial)
        chosen = (np.zeros((n, *act_shape), act_dtype), jax.tree_util.tree_map(
            lambda x: np.zeros((n, *np.shape(x)), x.dtype), initial))
        # Without a window (K == 0) there are no past actions, rewards or lookback lengths to
        # carry, and greedy acting needs no key: no state leaves (and no kernels) for them.
        return ActorState(obs, np.zeros((n, K, *act_shape), act_dtype) if K else None,
                          np.zeros((n, K), np.float32) if K else None, states,
                          np.zeros(n, np.int32) if K else None, np.zeros(n, np.int32),
                          chosen, rng if with_rng else None, e2m_state)

    def init(first_obs, rng) -> ActorState:
        n = jax.tree_util.tree_leaves(first_obs)[0].shape[0]
        return observe(blank(first_obs, rng), jnp.zeros(n, jnp.float32), first_obs,
                       jnp.ones(n, bool))

    def view(state: ActorState) -> EpisodeBatch:
        n = state.t.shape[0]
        emo = {"state_out": state.state_outs} if stateful else {}
        no_window = K == 0
        return EpisodeBatch(
            observations=state.observations,
            actions=jnp.zeros((n, 0, *act_shape), act_dtype) if no_window else state.actions,
            rewards=jnp.zeros((n, 0), jnp.float32) if no_window else state.rewards,
            extra_model_outputs=emo, lengths=jnp.zeros(n, jnp.int32),
            lookback_lengths=jnp.zeros(n, jnp.int32) if no_window else state.lookback_lengths,
            t_started=state.t,
            terminated=jnp.zeros(n, bool), truncated=jnp.zeros(n, bool), max_len=0,
            len_lookback_buffer=K, observation_space_spec=spaces.observation,
            action_space_spec=spaces.action)

    def select_action(params, state: ActorState):
        rng, key = jax.random.split(state.rng) if with_rng else (state.rng, None)
        act_key = None
        if keyed:
            key, act_key = jax.random.split(key)
        ctx = Context(rng=key, explore=explore, params=params, frozen=not update_env_to_module,
                      written_back=write_back)
        if write_back:
            episodes, batch, e2m_new, written = apply_writing_back(
                env_to_module, state.pipeline_state, view(state), {}, ctx)
            state = state._replace(observations=written)
        else:
            episodes, batch, e2m_new = env_to_module.apply(state.pipeline_state, view(state),
                                                           {}, ctx)
        extras = {}
        if stateful:
            dist_inputs, extras["state_out"] = policy.forward(params, batch)
            dist_inputs = dist_inputs[:, 0]  # RLlib removes the single-step time rank
        else:
            dist_inputs = (policy.apply(params, act_key, batch["obs"]) if keyed
                           else policy.apply(params, batch["obs"]))
        if module_to_env is None:
            actions = dist_inputs
        else:
            batch = {**batch, "action_dist_inputs": dist_inputs}
            _, batch, _ = module_to_env.apply(m2e_state, episodes, batch, ctx)
            actions = batch["actions_for_env"]
            extras.update({k: batch[k] for k in RECORDED_OUTPUTS if k in batch})
        n = state.t.shape[0]
        # the window holds the actions as the runner records them (what the env got)
        chosen = (jnp.asarray(actions).reshape(n, *act_shape).astype(act_dtype),
                  extras.get("state_out", ()))
        state = state._replace(chosen=chosen, rng=rng,
                               pipeline_state=e2m_new if update_env_to_module
                               else state.pipeline_state)
        return actions, extras, state

    def observe(state: ActorState, rewards, next_obs, fresh) -> ActorState:
        """Shifts each env's window by the step just taken; a fresh env starts afresh from
        `next_obs` (its reset observation)."""
        fresh = jnp.asarray(fresh, bool)

        def push(window, item):
            item = jnp.asarray(item, window.dtype)
            return jnp.concatenate([window[:, 1:], item[:, None]], axis=1)

        obs = jax.tree_util.tree_map(push, state.observations, next_obs) if K else \
            jax.tree_util.tree_map(lambda w, x: jnp.asarray(x, w.dtype)[:, None],
                                   state.observations, next_obs)
        acts, rews, outs = state.actions, state.rewards, state.state_outs
        if K:
            acts = push(acts, state.chosen[0])
            rews = push(rews, rewards)
            outs = jax.tree_util.tree_map(push, outs, state.chosen[1])
        lb = state.lookback_lengths
        if K:  # a fresh episode sees zeros before its reset observation
            lb = jnp.where(fresh, 0, jnp.minimum(lb + 1, K)).astype(jnp.int32)
            obs = jax.tree_util.tree_map(
                lambda w: jnp.where(expand(fresh, w) & (jnp.arange(K + 1) < K).reshape(
                    1, -1, *([1] * (w.ndim - 2))), jnp.zeros((), w.dtype), w), obs)
        t = jnp.where(fresh, 0, state.t + 1).astype(jnp.int32)
        return state._replace(observations=obs, actions=acts, rewards=rews, state_outs=outs,
                              lookback_lengths=lb, t=t)

    def step(params, state, rewards, next_obs, fresh):
        return select_action(params, observe(state, rewards, next_obs, fresh))

    def state_at(obs, t=None, prev_actions=None, prev_rewards=None, state=None,
                 obs_lookback: int = 0, rng=None) -> ActorState:
        """The state `observe` leaves after `t` steps of each env's episode, from what one
        step of a deployed policy receives (export builds its graph on this):

        * `obs`: the latest observations `[N, ...]`, or with `obs_lookback = L > 0` the last
          `L + 1` of them `[N, L + 1, ...]`, oldest first (`L <= window`);
        * `t` `[N]`: steps since each env's reset (None: 0, every observation its episode's
          first);
        * `prev_actions` `[N, ...]`, `prev_rewards` `[N]`: the previous step's (None: zeros);
        * `state`: the policy's state after the previous step (`[N, ...]` leaves; None: its
          initial state).

        As `observe` holds them: slots before an env's reset are zeros, and the state,
        previous action / reward and past observations given where `t == 0` are not read;
        window slots that none of the inputs fill are zeros. `rng`: the actor's key
        (exploring actors; for a policy that takes a key, `PRNGKey(0)` when None: greedy
        export's fixed key)."""
        n = jax.tree_util.tree_leaves(obs)[0].shape[0]
        t = jnp.zeros((n,), jnp.int32) if t is None else jnp.asarray(t, jnp.int32)
        zero_action = jnp.zeros((n, *act_shape), act_dtype)
        if stateful and state is None:
            state = jax.tree_util.tree_map(
                lambda x: jnp.broadcast_to(jnp.asarray(x), (n, *np.shape(x))),
                policy.initial_state())
        state = state if stateful else ()
        chosen = (zero_action, jax.tree_util.tree_map(jnp.zeros_like, state))
        if keyed and rng is None:  # greedy export: the policy's draws from a fixed key
            rng = jax.random.PRNGKey(0)
        rng = rng if with_rng else None
        if obs_lookback > K:
            raise ValueError(f"obs_lookback={obs_lookback} is more than the actor's window "
                             f"of {K} past steps")
        if K == 0:
            return ActorState(jax.tree_util.tree_map(lambda x: x[:, None], obs), None, None,
                              (), None, t, chosen, rng, e2m_state)
        real = jnp.minimum(t, K)

        def obs_window(x):
            x = x[:, None] if obs_lookback == 0 else x
            x = jnp.concatenate([jnp.zeros((n, K - obs_lookback, *x.shape[2:]), x.dtype), x],
                                axis=1)
            before_reset = jnp.arange(K + 1)[None, :] < (K - real)[:, None]
            return jnp.where(before_reset.reshape(*before_reset.shape, *[1] * (x.ndim - 2)),
                             jnp.zeros((), x.dtype), x)

        def last_of_window(x, shape, dtype):
            x = jnp.asarray(x, dtype).reshape(n, 1, *shape)
            return jnp.concatenate([jnp.zeros((n, K - 1, *shape), dtype), x], axis=1)

        actions = last_of_window(zero_action if prev_actions is None else prev_actions,
                                 act_shape, act_dtype)
        rewards = last_of_window(jnp.zeros((n,), jnp.float32) if prev_rewards is None
                                 else prev_rewards, (), jnp.float32)
        states = jax.tree_util.tree_map(lambda s: last_of_window(s, s.shape[1:], s.dtype),
                                        state)
        return ActorState(jax.tree_util.tree_map(obs_window, obs), actions, rewards, states,
                          real.astype(jnp.int32), t, chosen, rng, e2m_state)

    return Actor(init=jax.jit(init), blank=blank, select_action=jax.jit(select_action),
                 # Not donating `state`: its arrays are tiny, and aliasing them makes XLA copy
                 # each before updating it (more kernels per step than fresh outputs).
                 observe=jax.jit(observe), step=jax.jit(step), window=K, state_at=state_at)


def host_key(seed: int):
    """`jax.random.PRNGKey(seed)` built on the host where that is exact (the default threefry
    key of a seed in [0, 2**31) is `[0, seed]`), so making it compiles no device program.

    Args:
      seed: the seed.
    """
    if (jax.config.jax_default_prng_impl == "threefry2x32"
            and not jax.config.jax_enable_custom_prng and 0 <= int(seed) < 2**31):
        return np.array([0, int(seed)], np.uint32)
    return jax.random.PRNGKey(seed)


class ActorPolicy:
    """The actor as `EnvRunner` drives it (`acting.protocol`): `reset(obs, seed)` after the
    envs reset, `select() -> (actions, extras)` before each env step, `observe(rewards,
    next_obs, fresh)` after it. The window, recurrent state and RNG stay on the device; each
    step is one jitted call (`Actor.step`), and only the actions and the recorded outputs
    come back.

    Args:
      policy: a `rljax_offline.models.module.Module` (`apply(params, obs)`; recurrent:
        `forward`, `initial_state`), e.g. `make_policy(...)` or an algorithm's acting module.
      params: its parameters (settable between steps: `actor.params = new`).
      spaces: the env's `Spaces`.
      env_to_module: the env-to-module connector pipeline (see `make_actor`).
      module_to_env: the module-to-env connector pipeline.
      env_to_module_state: the fitted env-to-module state (settable: `actor.e2m_state`).
      lookback: how many past steps env-to-module reads, at least the pipeline's `lookback`.
      explore: sample actions (True) or act greedily (False).
    """

    def __init__(self, policy, params, spaces: Spaces, env_to_module: Connector | None = None,
                 env_to_module_state: Any = None, module_to_env: Connector | None = None, *,
                 lookback: int = 0, explore: bool = False):
        self.explore, self.spaces = explore, spaces
        self.actor = make_actor(policy, spaces, env_to_module, module_to_env,
                                env_to_module_state=env_to_module_state, lookback=lookback,
                                explore=explore)
        self.params = params
        self._e2m_state = env_to_module_state
        self._state: ActorState | None = None
        self._observed = None

    @property
    def params(self):
        return self._params

    @params.setter
    def params(self, params):
        self._params = jax.device_put(params)  # once, not on every step

    @property
    def e2m_state(self):
        return self._e2m_state

    @e2m_state.setter
    def e2m_state(self, e2m_state):
        self._e2m_state = e2m_state
        if self._state is not None and e2m_state is not None:
            self._state = self._state._replace(pipeline_state=jax.device_put(e2m_state))

    def custom_data(self, env: int) -> dict:
        """Nothing per episode (the `acting.protocol` method)."""
        del env
        return {}

    def running(self, num_envs: int) -> bool:
        """Whether the actor holds the windows of `num_envs` running envs."""
        return self._state is not None and int(self._state.t.shape[0]) == num_envs

    def reset(self, obs, seed: int) -> None:
        """Every env was reset to `obs` (`[N, ...]`); `seed` seeds the action sampling."""
        # The reset observations go in with the first select(), in the one jitted step: a
        # reset compiles and dispatches nothing of its own.
        self._state, self._observed = self._fresh(obs, seed)

    def _fresh(self, obs, seed: int) -> tuple:
        """The windows of envs just reset to `obs`, and what the first step observes."""
        state = self.actor.blank(obs, host_key(seed))
        if self._e2m_state is not None:
            state = state._replace(pipeline_state=self._e2m_state)
        n = state.t.shape[0]
        return state, (np.zeros(n, np.float32), obs, np.ones(n, bool))

    def compile(self, obs) -> None:
        """Compiles the step that `reset(obs, seed)` and `select()` run for envs observing a
        batch like `obs` (`[N, ...]`, the vector env's layout), without running it or
        changing this actor: the first real step then starts at once."""
        state, observed = self._fresh(obs, 0)
        self.actor.step.lower(self._params, state, *observed).compile()

    def observe(self, rewards, next_obs, fresh) -> None:
        """The env step that followed `select()`: its rewards and next observations; `fresh`
        marks the envs whose `next_obs` is a reset observation. Runs with the next select."""
        self._observed = (np.array(rewards, np.float32), next_obs, np.array(fresh, bool))

    def select(self) -> tuple[np.ndarray, dict]:
        """The actions for the envs' current observations, and the outputs to record."""
        if self._state is None:
            raise RuntimeError("ActorPolicy.select() before reset(obs, seed)")
        if self._observed is None:
            out = self.actor.select_action(self._params, self._state)
        else:
            out = self.actor.step(self._params, self._state, *self._observed)
            self._observed = None
        actions, extras, self._state = out
        # np.asarray per output: on CPU ~10x cheaper per call than one jax.device_get
        return np.asarray(actions), jax.tree_util.tree_map(np.asarray, extras)


def actor_for(policy: Any, explore: bool = False) -> ActorPolicy:
    """An `ActorPolicy` of a `learning.trained_policy.TrainedPolicy`: its acting module and
    params between its env-to-module pipeline (with the state the learner fitted) and its
    module-to-env pipeline, acting greedily unless `explore`. Each `EnvRunner` needs its
    own (an actor holds its envs' windows).

    Args:
      policy: the `TrainedPolicy` (e.g. `load_policy(checkpoint)` or `algo.policy()`).
      explore: sample actions (True) or act greedily.

    Returns:
      The `ActorPolicy`.
    """
    return ActorPolicy(policy.module, policy.params, policy.spaces,
                       policy.pipelines.env_to_module, policy.env_to_module_state(),
                       policy.pipelines.module_to_env, lookback=policy.lookback,
                       explore=explore)
