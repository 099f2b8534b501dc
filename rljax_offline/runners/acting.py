"""Acting with a trained module: env-to-module -> policy -> module-to-env, jitted as one
function, driven by `EnvRunner` through `ConnectorPolicy.act(builders, seed)`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from rljax_offline.batch import EpisodeBatch
from rljax_offline.connectors.core import Connector, Context, Spaces
from rljax_offline.episode_builder import EpisodeBuilder


def _latest_only_batch(builders: list[EpisodeBuilder], spaces) -> EpisodeBatch:
    """A batch of just the current observations (no lookback needed): skips building
    episode windows, the fast path for pipelines that read only the latest observation."""
    obs = jax.tree_util.tree_map(lambda *xs: np.stack(xs)[:, None],
                                 *[b.get_observations(-1) for b in builders])
    n = len(builders)
    act = np.zeros((n, 0), np.int64)
    return EpisodeBatch(observations=obs, actions=act, rewards=np.zeros((n, 0), np.float32),
                        extra_model_outputs={}, lengths=np.zeros(n, np.int32),
                        lookback_lengths=np.zeros(n, np.int32), t_started=np.zeros(n, np.int64),
                        terminated=np.zeros(n, bool), truncated=np.zeros(n, bool), max_len=0,
                        len_lookback_buffer=0, observation_space_spec=spaces.observation,
                        action_space_spec=spaces.action)


class ConnectorPolicy:
    """A policy for `EnvRunner`: runs the env-to-module pipeline on the episodes so far, the
    module, and the module-to-env pipeline, all in one jitted call.

    Args:
      policy: a `rljax_offline.models.policy.Policy`.
      params: its parameters.
      env_to_module, module_to_env: connector pipelines; their states are fixed (`frozen`).
      lookback: how many past steps the env-to-module pieces read (frame stacking: N - 1);
        at least the pipeline's declared `lookback`.
      explore: sample actions (True) or act greedily (False).

    A recurrent policy (`policy.is_stateful`) runs through `policy.forward` on the pipeline's
    `[B, 1, ...]` batch (build `env_to_module` with `max_seq_len` and `initial_state`); its
    `state_out` goes back to the runner as an extra model output, recorded per step, and is the
    next step's `state_in`, as in RLlib.
    """

    def __init__(self, policy, params, spaces, env_to_module: Connector,
                 env_to_module_state: Any, module_to_env: Connector, *, lookback: int = 0,
                 explore: bool = False):
        # at least what the pipeline's pieces declare they read (frame stacking: N - 1)
        self.spaces, self.explore = spaces, explore
        self.lookback = max(int(lookback), env_to_module.lookback)
        self.params, self.e2m_state = params, env_to_module_state
        self.m2e_state = module_to_env.init(env_to_module.out_spaces(spaces))

        self.policy = policy
        if policy.is_stateful:
            self.lookback = max(self.lookback, 1)  # the latest state_out rides in the lookback

        def act(params, e2m_state, m2e_state, episodes, seed):
            # The key is made inside: an eager PRNGKey is two more programs and a dispatch
            # per step.
            ctx = Context(rng=jax.random.PRNGKey(seed), explore=explore, params=params,
                          frozen=True)
            episodes, batch, _ = env_to_module.apply(e2m_state, episodes, {}, ctx)
            extras = {}
            if policy.is_stateful:
                dist_inputs, extras["state_out"] = policy.forward(params, batch)
                dist_inputs = dist_inputs[:, 0]  # RLlib removes the single-step time rank
            else:
                dist_inputs = policy.apply(params, batch["obs"])
            batch = {**batch, "action_dist_inputs": dist_inputs}
            _, batch, _ = module_to_env.apply(m2e_state, episodes, batch, ctx)
            return batch["actions_for_env"], {"action_logp": batch["action_logp"],
                                              "action_dist_inputs": batch["action_dist_inputs"],
                                              **extras}

        self._act = jax.jit(act)

    def act(self, builders: list[EpisodeBuilder], seed: int):
        episodes = _episodes_so_far(builders, self.spaces, self.lookback)
        if self.policy.is_stateful:
            episodes = _with_latest_state_out(episodes, builders, self.policy.initial_state())
        actions, extras = self._act(self.params, self.e2m_state, self.m2e_state, episodes,
                                    np.int32(seed))
        return np.asarray(actions), jax.tree_util.tree_map(np.asarray, extras)


class PipelinePolicy:
    """Any callable module between optional connector pipelines, for `EnvRunner`.

    `env_to_module` (None: the latest raw observations) makes `obs` from the episodes so far;
    `module(obs)` runs eagerly (numpy or jax); with `module_to_env` its output is taken as
    `action_dist_inputs` and the pipeline's `actions_for_env` go to the env, otherwise the
    output are the actions. The pipelines are jitted; their states are fixed (`frozen`).
    """

    def __init__(self, module: Callable, spaces: Spaces, env_to_module: Connector | None = None,
                 module_to_env: Connector | None = None, *, env_to_module_state: Any = None,
                 lookback: int = 0, explore: bool = False):
        self.module, self.spaces, self.lookback = module, spaces, int(lookback)
        self.e2m, self.m2e, self.explore = env_to_module, module_to_env, explore
        if env_to_module is not None:
            self.e2m_state = (env_to_module.init(spaces) if env_to_module_state is None
                              else env_to_module_state)
            self._e2m = jax.jit(env_to_module.apply)
            module_spaces = env_to_module.out_spaces(spaces)
        else:
            module_spaces = spaces
        if module_to_env is not None:
            self.m2e_state = module_to_env.init(module_spaces)
            self._m2e = jax.jit(module_to_env.apply)

    def act(self, builders: list[EpisodeBuilder], seed: int):
        episodes = _episodes_so_far(builders, self.spaces, self.lookback)
        ctx = Context(rng=jax.random.PRNGKey(seed), explore=self.explore, frozen=True)
        if self.e2m is None:
            obs = jax.tree_util.tree_map(lambda x: x[:, -1], episodes.observations)
        else:
            episodes, batch, _ = self._e2m(self.e2m_state, episodes, {}, ctx)
            obs = batch["obs"]
        out = self.module(obs)
        if self.m2e is None:
            return out
        _, batch, _ = self._m2e(self.m2e_state, episodes, {"action_dist_inputs": out}, ctx)
        extras = {k: np.asarray(batch[k]) for k in ("action_logp", "action_dist_inputs")
                  if k in batch}
        return np.asarray(batch.get("actions_for_env", batch["actions"])), extras


def _episodes_so_far(builders: list[EpisodeBuilder], spaces, lookback: int) -> EpisodeBatch:
    """The running episodes as an `EpisodeBatch` holding the last `lookback` steps."""
    if lookback == 0:
        return _latest_only_batch(builders, spaces)
    windows = [b.lookback_window(lookback, extra_model_outputs=False) for b in builders]
    return EpisodeBatch.from_episodes(windows, max_len=0, len_lookback_buffer=lookback)


def _with_latest_state_out(episodes: EpisodeBatch, builders: list[EpisodeBuilder],
                           initial_state) -> EpisodeBatch:
    """`episodes` (lookback windows) with each episode's latest `state_out` in the last
    lookback column (the initial state for episodes without a step; `add_states` then picks
    the initial state for them anyway, by `t_started == 0`)."""
    L = episodes.len_lookback_buffer
    latest = [b.get_extra_model_outputs("state_out", -1) if len(b) else initial_state
              for b in builders]
    stacked = jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]),
                                     *latest)
    column = jax.tree_util.tree_map(
        lambda x: np.concatenate([np.zeros((x.shape[0], L - 1, *x.shape[1:]), x.dtype),
                                  x[:, None]], axis=1), stacked)
    return episodes.replace(extra_model_outputs={"state_out": column})


class ActorPolicy:
    """`ConnectorPolicy`'s interface for `EnvRunner`, run by the pure on-device actor
    (`runners.actor`): the lookback window and recurrent state stay on the device and each
    step is one jitted call (`observe_and_select`), instead of rebuilding `EpisodeBatch`
    windows from the builders on the host. Same arguments as `ConnectorPolicy`; same actions.

    It reads from the builders only each env's latest observation and reward, and treats a
    builder without steps as a fresh episode (the runner starts one after every reset).
    """

    def __init__(self, policy, params, spaces, env_to_module: Connector,
                 env_to_module_state: Any, module_to_env: Connector, *, lookback: int = 0,
                 explore: bool = False):
        from rljax_offline.runners.actor import make_actor

        self.actor = make_actor(policy, spaces, env_to_module, module_to_env,
                                env_to_module_state=env_to_module_state, lookback=lookback,
                                explore=explore)
        self.params, self.stateful = params, policy.is_stateful
        self._state = self._extras = None

    def act(self, builders: list[EpisodeBuilder], seed: int):
        obs = np.stack([np.asarray(b.get_observations(-1)) for b in builders])
        rng = jax.random.PRNGKey(seed)
        if self._state is None or self._state.t.shape[0] != len(builders):
            actions, extras, state = self.actor.select_action(self.params,
                                                              self.actor.init(obs), rng)
        else:
            fresh = np.array([len(b) == 0 for b in builders])
            rewards = np.array([b.get_rewards(-1) if len(b) else 0.0 for b in builders],
                               np.float32)
            actions, extras, state = self.actor.observe_and_select(
                self.params, self._state, self._extras, rewards, obs, fresh, rng)
        self._state, self._extras = state, extras
        out = {"action_logp": np.asarray(extras["action_logp"])}
        if self.stateful:
            out["state_out"] = jax.tree_util.tree_map(np.asarray, extras["state_out"])
        return np.asarray(actions), out
