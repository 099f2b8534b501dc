"""`MultiAgentAlgorithm`: any registered offline algorithm trained per module on multi-agent
data, every module in one compiled update; what `config.multi_agent(...).build()` makes.

RLlib's offline stack refuses multi-agent data ("Loading multi-agent episodes ... is currently
not supported"); here the same config with `multi_agent(policies=..., policy_mapping_fn=...)`
reads the open multi-agent Parquet format, maps each agent's episode to its module, makes each
module's learner columns with that module's pipelines and trains all modules together
(`learning.multi_data_parallel`): modules of one config and spaces stacked under `vmap`,
others after them in the same program, `policies_to_train` honoured. Evaluation runs the
modules in the multi-agent env (`MultiAgentEnvRunner`) and reports the team return (the sum
over agents, RLlib's `episode_return_mean`) with per-agent and per-module returns.

The default maps every agent to one module, `default_policy` (parameter sharing, RLlib's
default). With `count_steps_by="env_steps"` (RLlib's default) a module's update batch holds
`train_batch_size_per_learner` steps of each agent mapped to it.

An algorithm whose config class sets `trains_team_module` (MATD3+BC, a centralised critic)
trains its modules as one team instead, on joint rows: `train_batch_size_per_learner` env
steps an update, each holding every agent's step and the env's global state
(`connectors.joint_rows`); the runtime steps the team as any module (named by its module, or
its modules joined by "+": `learners["listener+speaker"]`), and acting runs each module's
actor per agent.
"""

from __future__ import annotations

import time
from typing import Any

import jax
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.acting.multi_agent_actor import ModuleActor
from rljax_offline.acting.multi_agent_evaluator import MultiAgentEvaluator
from rljax_offline.acting.multi_agent_runner import agent_spaces, as_parallel
from rljax_offline.algorithms import multi_agent_data as ma_data
from rljax_offline.algorithms.checkpointing import CHECKPOINT_FORMAT, _meta_of_one_run
from rljax_offline.algorithms.config import AlgorithmConfig, ConfigError
from rljax_offline.algorithms.multi_agent_modules import (
    agent_mapping,
    build_modules,
    build_team_module,
    module_groups,
)
from rljax_offline.envs.make import multi_agent_env_factory
from rljax_offline.errors import OPEError
from rljax_offline.export import export_policy, policy_parts
from rljax_offline.learning import checkpoint as ckpt
from rljax_offline.learning.data_parallel import select_devices
from rljax_offline.learning.init import state_template
from rljax_offline.learning.multi_data_parallel import MultiModuleParallel
from rljax_offline.learning.multi_module import init_multi_state, unstack
from rljax_offline.learning.trained_policy import TrainedPolicy, make_policy, saved_config
from rljax_offline.ope.evaluation import policy_target
from rljax_offline.ope.multi_agent import estimate_team
from rljax_offline.runtime import distributed

__all__ = ["MultiAgentAlgorithm"]


def _check(config: AlgorithmConfig) -> None:
    """One-line errors for what multi-agent training does not do (yet)."""
    why = None
    if config.trains_online:
        why = ("online multi-agent training is built for PPO (IPPO, MAPPO); "
               f"{config.algo_name} trains offline here")
    elif config.streams_data:
        why = "multi-agent data is materialized on the devices (materialize_data=True)"
    elif config.off_policy_estimation_methods:
        why = "off-policy estimation of multi-agent policies is not built yet"
    elif config.output is not None:
        why = "recording evaluation episodes of multi-agent runs is not built yet"
    elif config.num_processes not in (None, 1):
        why = "multi-agent training runs on one process (any number of its devices)"
    if why:
        raise ConfigError(f"{type(config).__name__}.multi_agent(): {why}")


def global_state_shape(env: Any, seed: int) -> tuple | None:
    """The shape of the env's global state (`state_space`, else `state()` after a reset);
    None for an env without `state()`."""
    space = getattr(env, "state_space", None)
    if getattr(space, "shape", None):
        return tuple(space.shape)
    if not callable(getattr(env, "state", None)):
        return None
    env.reset(seed=seed)
    return tuple(np.shape(env.state()))


class MultiAgentAlgorithm:
    """Offline training of several modules (see the module docstring).

    Args:
      config: a config on which `multi_agent(...)` was called.
      process: the process setup `build()` did (unused here: one process).
    """

    def __init__(self, config: AlgorithmConfig, process: Any = None):
        config.validate()
        _check(config)
        self.config = config
        self.env_fn = multi_agent_env_factory(config.env, config.env_config)
        probe = as_parallel(self.env_fn())
        try:
            _, obs_spaces, act_spaces = agent_spaces(probe)
            self.team = config.trains_team_module
            state_shape = (global_state_shape(probe, config.seed)
                           if self.team and config.use_global_state else None)
        finally:
            getattr(probe, "close", lambda: None)()
        self.mapping = agent_mapping(config)
        # a team module's critic reads the env's state (else the concatenated observations)
        self.env_state = state_shape is not None
        # `modules`: what trains (a team: one unit holding every module's actor);
        # `members`: the modules that act, export and are mapped to (the same without a team)
        if self.team:
            self.modules, self.members = build_team_module(config, obs_spaces, act_spaces,
                                                           state_shape)
        else:
            self.modules = self.members = build_modules(config, obs_spaces, act_spaces)
        self.groups = module_groups(self.modules)
        self.devices = select_devices(config.num_devices)
        self.runtime = MultiModuleParallel(
            self.groups, self.devices, {g: self.modules[g].rows_per_update for g in self.groups},
            mode=config.update_mode, policies_to_train=config.policies_to_train)
        per_member = {m: s.pipelines.learner.init(s.spaces) for m, s in self.members.items()}
        self._initial_connector_states = (
            {team: per_member for team in self.modules} if self.team else per_member)
        self.state = self.runtime.put_replicated(init_multi_state(
            self.groups, config.seed, self._initial_connector_states))
        self.data: dict | None = None
        self.counts: dict = {}
        self.iteration = 0
        self.history: list[dict] = []
        self.timers: dict[str, float] = {}
        self._restored = False
        self._actors: dict[str, ModuleActor] = {}
        self.evaluator = MultiAgentEvaluator(self.env_fn, self.mapping,
                                             max_envs=config.evaluation_num_envs,
                                             seed=config.seed)

    @property
    def algo_name(self) -> str:
        return self.config.algo_name

    @property
    def module_ids(self) -> list[str]:
        return sorted(self.members)

    # ------------------------------------------------------------------ data

    def load_data(self) -> None:
        """Reads the data and keeps each module's learner columns on the devices (RLlib does
        this in the first iteration); called by `train()`."""
        if self.config.input_ is None:
            raise ConfigError("no offline data: set config.offline_data(input_=...)")
        t0 = time.perf_counter()
        episodes = ma_data.read_input(self.config.input_, self.config.input_filesystem)
        if not episodes:
            raise ConfigError(f"no episodes found in {self.config.input_!r}")
        if self.team:
            (team,) = self.modules
            self.data, states, self.counts = ma_data.materialize_team(
                episodes, team, self.modules[team], self.members,
                self.connector_states()[team], self.runtime, fit=not self._restored,
                env_state=self.env_state,
                normalize_state=self.config.normalize_observations)
        else:
            by_module = ma_data.episodes_by_module(episodes, self.mapping, self.modules)
            self.data, states, self.counts = ma_data.materialize_modules(
                by_module, self.modules, self.connector_states(), self.runtime,
                fit=not self._restored, sample_unit=self.config.sample_unit)
        self._set_connector_states(states)
        self.timers["data_load_s"] = time.perf_counter() - t0

    def connector_states(self) -> dict:
        """`{module_id: its learner connector state}` (host arrays)."""
        per_module = unstack(self.groups, {g: s.connector_state for g, s in self.state.items()})
        return jax.device_get(per_module)

    def _set_connector_states(self, states: dict) -> None:
        new = {}
        for name, group in self.groups.items():
            stacked = jax.tree_util.tree_map(lambda *xs: np.stack(xs),
                                             *[states[m] for m in group.module_ids])
            new[name] = self.state[name]._replace(connector_state=stacked)
        self.state = self.runtime.put_replicated(jax.device_get(new))
        self._actors = {}  # acting reads the fitted state: rebuilt on the next evaluation

    # ------------------------------------------------------------------ training

    def train(self) -> dict:
        """One iteration: `num_updates_per_iteration` updates of every module in one
        compiled scan; RLlib-style metrics, per module under `learners`."""
        t0 = time.perf_counter()
        if self.data is None:
            self.load_data()
        n = self.config.updates_per_iteration
        self.state, metrics = self.runtime.scan_on_device(self.state, self.data, n,
                                                          self.config.sample_unit)
        metrics = jax.device_get(metrics)
        update_s = time.perf_counter() - t0
        self.iteration += 1
        learners: dict = {}
        agent_steps = 0
        for module_id, values in metrics.items():
            rows = self.modules[module_id].rows_per_update * n
            agent_steps += rows * (len(self.modules[module_id].agents) if self.team else 1)
            learners[module_id] = {**{k: float(v) for k, v in values.items()},
                                   "num_module_steps_trained": rows,
                                   "num_module_steps_trained_lifetime": rows * self.iteration}
        learners["__all_modules__"] = {
            "num_env_steps_trained": n * self.config.update_batch_size,
            "num_agent_steps_trained": agent_steps, "learner_update_timer": update_s / n}
        result = {"training_iteration": self.iteration, "algorithm": self.algo_name,
                  "learners": learners, "num_devices": len(self.devices)}
        return self._end_iteration(result, t0)

    def _end_iteration(self, result: dict, t0: float) -> dict:
        """An iteration's last steps, for every multi-agent algorithm: the evaluation when the
        interval says so, the iteration's time, the history."""
        interval = self.config.evaluation_interval
        if interval and self.iteration % interval == 0:
            result["evaluation"] = {"env_runners": self.evaluate()}
        result["time_this_iter_s"] = time.perf_counter() - t0
        self.history.append(result)
        return result

    # ------------------------------------------------------------------ acting

    def policy(self, module_id: str) -> TrainedPolicy:
        """Module `module_id`'s trained policy (`learning.trained_policy`): what export,
        `load_policy`-style use and fine-tuning of that module consume."""
        if module_id not in self.members:
            raise KeyError(f"no module {module_id!r}; modules: {self.module_ids}")
        m = self.members[module_id]
        states = unstack(self.groups, self.state)
        params = self._member_params({u: s.params for u, s in states.items()}, module_id)
        connector_state = (next(iter(states.values())).connector_state[module_id] if self.team
                           else states[module_id].connector_state)
        return make_policy(m.config, m.gym_spaces, params, connector_state,
                           (m.spec, m.pipelines))

    def _member_params(self, params: dict, module_id: str) -> dict:
        """Module `module_id`'s acting params from `{trained unit: params}`: the team's actor
        of the module (as its single-agent spec's `policy`), else the module's own."""
        if not self.team:
            return params[module_id]
        (team,) = params.values()
        return {"policy": team["policy"][module_id]}

    def export_policy(self, module_id: str, path: str, format: str = "stablehlo") -> str:
        """Writes module `module_id`'s greedy acting step as one graph (`rljax_offline.export`),
        as `Algorithm.export_policy` does for a single-agent policy."""
        return export_policy(policy_parts(self.policy(module_id)), path, format)

    def agent_targets(self, explore: bool = True) -> dict:
        """`{agent_id: obs -> action probabilities}`: each agent's module as an `ope.target`
        function (Discrete modules whose learner pipeline fits nothing on the observations;
        others are a named error), for `ope.estimate_team`."""
        targets = {}
        for module_id, m in self.members.items():
            policy = self.policy(module_id)
            if not isinstance(m.spaces.action, sp.DiscreteSpec) or \
                    jax.tree_util.tree_leaves(policy.rows_state()):
                raise OPEError(f"module {module_id!r}: team OPE of a trained module needs "
                               "Discrete actions and no fitted observation pieces")
            target = policy_target(policy, explore)
            for agent_id in m.agents:
                targets[agent_id] = target.probs
        return targets

    def estimate_off_policy(self, episodes: list, methods=("wis", "pdis", "fqe", "dr"),
                            **options) -> dict:
        """Team off-policy estimates of the current modules on multi-agent `episodes`
        (`ope.estimate_team` with `agent_targets`); `options` as `ope.estimate`'s."""
        return estimate_team(self.agent_targets(), episodes, methods,
                             gamma=options.pop("gamma", self.config.gamma), **options)

    def _module_actors(self) -> dict[str, ModuleActor]:
        """Each module's actor with the current params (compiled once per fitted state)."""
        params = jax.device_get(unstack(self.groups, {g: s.params
                                                      for g, s in self.state.items()}))
        if not self._actors:
            self._actors = {m: ModuleActor(self.policy(m), m, self.config.evaluation_explore)
                            for m in self.members}
        for m, actor in self._actors.items():
            actor.set_params(self._member_params(params, m))
        return self._actors

    def sample_episodes(self, num_episodes: int) -> list:
        """`num_episodes` multi-agent episodes of the current modules in the env."""
        return self.evaluator.sample(self._module_actors(), num_episodes)

    def evaluate(self, num_episodes: int | None = None) -> dict:
        """Runs the modules in the env: RLlib's multi-agent `env_runners` metrics (the team
        return `episode_return_mean`, `agent_episode_returns_mean`,
        `module_episode_returns_mean`)."""
        return self.evaluator.evaluate(self._module_actors(),
                                       num_episodes or self.config.evaluation_duration)

    # ------------------------------------------------------------------ checkpoints

    def save(self, path: str) -> str:
        """An atomic checkpoint of every module's state (`learning.checkpoint`)."""
        if distributed.is_writer():
            meta = {"format": CHECKPOINT_FORMAT, "algorithm": self.algo_name,
                    "config": self.config.to_dict(), "iteration": self.iteration,
                    "history": self.history,
                    "groups": {g: list(grp.module_ids) for g, grp in self.groups.items()}}
            ckpt.save_checkpoint(path, jax.device_get(self.state), meta)
        distributed.barrier(f"checkpoint saved: {path}")
        return path

    def restore(self, path: str) -> None:
        """Loads a checkpoint of the same modules; training continues exactly where it
        was."""
        meta = _meta_of_one_run(self, path, "")
        saved = meta.get("groups")
        mine = {g: list(grp.module_ids) for g, grp in self.groups.items()}
        if saved != mine:
            raise ckpt.CheckpointError(f"checkpoint {path!r} holds the modules {saved}, this "
                                       f"algorithm has {mine}")
        template = {}
        for name, group in self.groups.items():
            one = state_template(group.learning,
                                 self._initial_connector_states[group.module_ids[0]])
            count = len(group.module_ids)
            template[name] = jax.tree_util.tree_map(
                lambda x, k=count: np.zeros((k, *np.shape(x)), np.asarray(x).dtype), one)
        self.state = self.runtime.put_replicated(ckpt.load_state(path, template))
        self.iteration = int(meta["iteration"])
        self.history = list(meta.get("history", []))
        self._restored = True
        self.data = None  # read again: columns with the restored connector states
        self._actors = {}

    @classmethod
    def from_checkpoint(cls, path: str, config: AlgorithmConfig | None = None
                        ) -> MultiAgentAlgorithm:
        """Rebuilds the algorithm from a checkpoint (its saved config unless one is given:
        needed when it held code, e.g. a `policy_mapping_fn` function or an env factory)."""
        algo = (config or saved_config(path)).build()
        algo.restore(path)
        return algo

    def stop(self) -> None:
        """Closes the evaluation envs."""
        self.evaluator.close()
