"""`MultiModulePPO`: PPO over the multi-agent env runner with several modules (IPPO, one
module per agent or per kind of agent), and MAPPO (`centralized_value=True`): what
`PPOConfig().multi_agent(...).build()` makes unless one module that every agent shares and
a decentralised value (`ppo.multi_agent.MultiAgentPPO`) is asked for.

Each iteration samples whole multi-agent episodes with every module's exploring policy
from `num_envs_per_env_runner` env copies (`MultiAgentEnvRunner`) until every module holds
its train batch: `train_batch_size_per_learner` steps of each agent mapped to it
(`count_steps_by="env_steps"`, RLlib's default) or that many rows (`"agent_steps"`). Every
agent's episode goes through its module's learner pipeline with the module's current
params (GAE per agent, on the agent's own rewards), the advantages are standardized over
the module's batch, and every module runs `num_epochs` epochs of `minibatch_size` updates
in ONE compiled program (`learning.multi_data_parallel.MultiModuleParallel.epochs_on_device`:
modules of one spec and batch stacked under `vmap`, heterogeneous modules one after the
other in the same program); `policies_to_train` is honoured (the others act, unchanged).
The KL coefficient adapts per module.

With `centralized_value=True` each module's value network reads the global state at the
agent's env step instead of its observation (`ppo.centralized_value`); the actors stay
decentralised, so acting and export need the actor alone.

Metrics: the team return (the sum over agents) under `env_runners`, per-module learner
metrics under `learners`. Checkpoints, `from_checkpoint`, `policy(module_id)`,
`export_policy(module_id, ...)` and `evaluate()` are the offline multi-agent facade's
(`algorithms.multi_agent.MultiAgentAlgorithm`); with `offline_data(output=...)` the sampled
and evaluated multi-agent episodes are recorded as in IPPO. With `init_policy_from` every
module starts from the policy of the checkpoint's module of the same id
(`ppo.multi_agent_fine_tuning`).
"""

from __future__ import annotations

import collections
import time
from typing import Any

import jax
import numpy as np

from rljax_offline.acting.env_runner import SAMPLING, stream_seed
from rljax_offline.acting.multi_agent_actor import ModuleActor
from rljax_offline.acting.multi_agent_episode_output import MultiAgentEpisodeOutput
from rljax_offline.acting.multi_agent_evaluator import MultiAgentEvaluator
from rljax_offline.acting.multi_agent_runner import MultiAgentEnvRunner, probe_agent_spaces
from rljax_offline.algorithms.config import AlgorithmConfig
from rljax_offline.algorithms.multi_agent import MultiAgentAlgorithm
from rljax_offline.algorithms.multi_agent_modules import agent_mapping, build_modules
from rljax_offline.algorithms.ppo import centralized_value as cv
from rljax_offline.algorithms.ppo.config import standardize
from rljax_offline.algorithms.ppo.multi_agent import MultiAgentPPO, check_multi_agent_ppo
from rljax_offline.algorithms.ppo.multi_agent_fine_tuning import module_policy_starts
from rljax_offline.algorithms.ppo.rollouts import explained_variance
from rljax_offline.connectors.rows import episode_rows
from rljax_offline.envs.make import multi_agent_env_factory
from rljax_offline.learning.data_parallel import select_devices
from rljax_offline.learning.multi_data_parallel import MultiModuleParallel
from rljax_offline.learning.multi_module import group_modules, init_multi_state, unstack

__all__ = ["MultiModulePPO", "multi_agent_ppo"]


class MultiModulePPO(MultiAgentAlgorithm):
    """PPO with several modules, or a centralised value (see the module docstring).

    Args:
      config: a `PPOConfig` on which `multi_agent(...)` was called.
      process: the process setup `build()` did (unused: one process).
    """

    def __init__(self, config: AlgorithmConfig, process: Any = None):
        config.validate()
        check_multi_agent_ppo(config)
        self.config = config
        self.env_fn = multi_agent_env_factory(config.env, config.env_config)
        self.global_state = (cv.GlobalState.of(self.env_fn, config.seed)
                             if config.centralized_value else None)
        _, obs_spaces, act_spaces = probe_agent_spaces(self.env_fn)
        self.mapping = agent_mapping(config)
        self.team, self.env_state = False, False
        value_input = None if self.global_state is None else self.global_state.spec
        # no team here: the modules that train are the ones that act (`members`)
        self.modules = self.members = build_modules(
            config, obs_spaces, act_spaces,
            spec_options=None if value_input is None else {"value_input": value_input})
        for m in self.modules.values():
            m.config.validate()
        per_agent = {mid: len(m.agents) if config.count_steps_by == "env_steps" else 1
                     for mid, m in self.modules.items()}
        self.train_rows = {mid: m.config.train_batch_size_per_learner * per_agent[mid]
                           for mid, m in self.modules.items()}
        self.groups = group_modules({m: s.spec.learning for m, s in self.modules.items()},
                                    self.train_rows)
        self.devices = select_devices(config.num_devices)
        self.runtime = MultiModuleParallel(
            self.groups, self.devices,
            {g: self.modules[g].config.minibatch_size for g in self.groups},
            mode=config.update_mode, policies_to_train=config.policies_to_train)
        self._initial_connector_states = {
            m: s.pipelines.learner.init(s.spaces) for m, s in self.modules.items()}
        self.state = self.runtime.put_replicated(init_multi_state(
            self.groups, config.seed, self._initial_connector_states))
        self._learner_apply = {m: jax.jit(s.pipelines.learner.apply)
                               for m, s in self.modules.items()}
        self._epochs = self.runtime.epochs_on_device(config.num_epochs)
        self.data, self.counts = None, {}
        self.iteration, self.env_steps_sampled = 0, 0
        self.history: list[dict] = []
        self.timers: dict[str, float] = {}
        self._restored = False
        self._actors: dict[str, ModuleActor] = {}
        self._sampling_actors: dict[str, ModuleActor] = {}
        self._sampling_runner: MultiAgentEnvRunner | None = None
        self._outputs: dict[str, MultiAgentEpisodeOutput] = {}
        self._recent = collections.deque(maxlen=config.metrics_num_episodes_for_smoothing)
        self.evaluator = MultiAgentEvaluator(self.env_fn, self.mapping,
                                             max_envs=config.evaluation_num_envs,
                                             seed=config.seed)

    def load_data(self) -> None:
        """Online: there is nothing to read."""

    # ------------------------------------------------------------------ sampling

    def _params(self) -> dict:
        """`{module_id: its params}` (host copies)."""
        return jax.device_get(unstack(self.groups, {g: s.params
                                                    for g, s in self.state.items()}))

    def sample(self) -> tuple[dict, list]:
        """Whole multi-agent episodes with the exploring modules until every module holds
        its train batch: `({module_id: agent episodes}, [(team return, env steps)])`."""
        c = self.config
        params = self._params()
        if not self._sampling_actors:
            self._sampling_actors = {m: ModuleActor(self.policy(m), m, explore=True,
                                                    outputs=True) for m in self.modules}
        for m, actor in self._sampling_actors.items():
            actor.set_params(params[m])
        if self._sampling_runner is None:
            self._sampling_runner = MultiAgentEnvRunner(
                self.env_fn, self._sampling_actors, agent_to_module_mapping_fn=self.mapping,
                num_envs=c.num_envs_per_env_runner,
                seed=stream_seed(c.seed, SAMPLING, self.iteration),
                global_state=self.global_state is not None)
        by_module: dict[str, list] = {m: [] for m in self.modules}
        finished: list = []
        while any(sum(map(len, by_module[m])) < n for m, n in self.train_rows.items()):
            episodes = self._sampling_runner.sample(c.num_envs_per_env_runner)
            self.record("sampled", episodes)
            for ma in episodes:
                agent_episodes = (self.global_state.attach(ma) if self.global_state
                                  else ma.agent_episodes)
                for agent_id, ep in agent_episodes.items():
                    by_module[self.mapping(agent_id, ma)].append(ep)
            finished.extend((ma.get_return(), ma.env_steps()) for ma in episodes)
        return by_module, finished

    def record(self, group: str, episodes: list) -> None:
        """With `offline_data(output=...)`: whole multi-agent `episodes` to
        `<output>/<group>/` (as IPPO records them)."""
        if self.config.output is None:
            return
        if group not in self._outputs:
            self._outputs[group] = MultiAgentEpisodeOutput(self.config, group)
        self._outputs[group].add(episodes)

    # ------------------------------------------------------------------ training

    def _columns(self, by_module: dict) -> tuple[dict, dict]:
        """Each module's train batch (GAE with its current params, the first
        `train_rows` rows, advantages standardized) and its fitted connector state."""
        params, states = self._params(), self.connector_states()
        columns, fitted = {}, {}
        for m, eps in by_module.items():
            cols, fitted[m], _ = episode_rows(
                self._learner_apply[m], eps, states[m], self.modules[m].pipelines.columns,
                fit=True, params=params[m], what=f"module {m!r}'s PPO learner")
            cols = jax.tree_util.tree_map(lambda x, n=self.train_rows[m]: x[:n], cols)
            cols["advantages"] = standardize(cols["advantages"])
            columns[m] = cols
        return columns, fitted

    def train(self) -> dict:
        """One iteration: sample, then `num_epochs` epochs of every trained module in one
        compiled program; RLlib-style metrics (see the module docstring)."""
        t0 = time.perf_counter()
        by_module, finished = self.sample()
        sample_s = time.perf_counter() - t0
        t_upd = time.perf_counter()
        columns, fitted = self._columns(by_module)
        if any(jax.tree_util.tree_leaves(s) for s in fitted.values()):
            self._set_connector_states(fitted)
        data = {g: jax.tree_util.tree_map(lambda *xs: np.stack(xs),
                                          *[columns[m] for m in grp.module_ids])
                for g, grp in self.groups.items()}
        self.state, metrics = self._epochs(self.state, self.runtime.put_replicated(data))
        metrics = jax.device_get(metrics)
        self._adapt_kl_coeffs(metrics)
        extra = unstack(self.groups, jax.device_get({g: s.extra
                                                     for g, s in self.state.items()}))
        learners: dict = {}
        for m, values in metrics.items():
            c = self.modules[m].config
            updates = c.num_epochs * (self.train_rows[m] // c.minibatch_size)
            learners[m] = {**{k: float(v) for k, v in values.items()},
                           **{k: float(v) for k, v in extra[m].items()},
                           "num_module_steps_trained": updates * c.minibatch_size,
                           "vf_explained_var": explained_variance(columns[m])}
        steps = sum(n for _, n in finished)
        learners["__all_modules__"] = {
            "num_env_steps_trained": steps,
            "num_agent_steps_trained": sum(v["num_module_steps_trained"]
                                           for k, v in learners.items()),
            "learner_update_timer": time.perf_counter() - t_upd}
        self.iteration += 1
        self.env_steps_sampled += steps
        self._recent.extend(finished)
        returns = np.array([r for r, _ in self._recent])
        result = {"training_iteration": self.iteration, "algorithm": self.algo_name,
                  "env_runners": {"episode_return_mean": float(returns.mean()),
                                  "episode_return_min": float(returns.min()),
                                  "episode_return_max": float(returns.max()),
                                  "episode_len_mean": float(np.mean(
                                      [n for _, n in self._recent])),
                                  "num_episodes": len(finished),
                                  "num_env_steps_sampled": steps,
                                  "num_env_steps_sampled_lifetime": self.env_steps_sampled,
                                  "sample_time_s": sample_s},
                  "num_env_steps_sampled_lifetime": self.env_steps_sampled,
                  "learners": learners, "num_devices": len(self.devices),
                  "fine_tuned_from": self.fine_tuned_from}
        return self._end_iteration(result, t0)

    def _adapt_kl_coeffs(self, metrics: dict) -> None:
        """RLlib's rule per trained module (`ppo.rollouts.adapt_kl_coeff`)."""
        c = self.config
        if not c.use_kl_loss:
            return
        states = jax.device_get(self.state)
        for name, group in self.groups.items():
            coeffs = np.array(states[name].extra["curr_kl_coeff"])
            for i, m in enumerate(group.module_ids):
                if m not in metrics:
                    continue
                kl = float(metrics[m]["mean_kl_loss"])
                target = self.modules[m].config.kl_target
                coeffs[i] *= 1.5 if kl > 2.0 * target else 0.5 if kl < 0.5 * target else 1.0
            extra = {**states[name].extra, "curr_kl_coeff": coeffs.astype(np.float32)}
            states[name] = states[name]._replace(extra=extra)
        self.state = self.runtime.put_replicated(states)

    # ------------------------------------------------------------------ fine-tuning

    fine_tuned_from: str | None = None

    def fine_tune_from(self, path: str) -> None:
        """Every module's policy weights from the multi-agent checkpoint at `path`
        (`ppo.multi_agent_fine_tuning`); `PPOConfig.build()` calls it for
        `init_policy_from`.

        Args:
          path: a multi-agent checkpoint with the same module ids.
        """
        starts = module_policy_starts(path, self.modules, self._params())
        states = jax.device_get(self.state)
        for name, group in self.groups.items():
            params = dict(states[name].params)
            stacked = jax.tree_util.tree_map(np.array, params["policy"])
            for i, m in enumerate(group.module_ids):
                jax.tree_util.tree_map(lambda x, v, i=i: x.__setitem__(i, v), stacked,
                                       starts[m])
            states[name] = states[name]._replace(params={**params, "policy": stacked})
        self.state = self.runtime.put_replicated(states)
        self.fine_tuned_from = path

    # ------------------------------------------------------------------ acting

    def evaluate(self, num_episodes: int | None = None) -> dict:
        """The modules in the env (`evaluation_explore`): the team's `env_runners`
        metrics; recorded to `<output>/evaluation/` with `offline_data(output=...)`."""
        return self.evaluator.evaluate(self._module_actors(),
                                       num_episodes or self.config.evaluation_duration,
                                       on_episodes=lambda eps: self.record("evaluation", eps))

    # ------------------------------------------------------------------ checkpoints

    def save(self, path: str) -> str:
        for out in self._outputs.values():
            out.flush()
        return super().save(path)

    def restore(self, path: str) -> None:
        """Loads a checkpoint of the same modules; the next iteration samples from new
        envs seeded by the iteration (as a restored IPPO run does)."""
        super().restore(path)
        last = self.history[-1] if self.history else {}
        self.env_steps_sampled = int(last.get("num_env_steps_sampled_lifetime", 0))
        self._close_sampling()

    def _close_sampling(self) -> None:
        if self._sampling_runner is not None:
            self._sampling_runner.close()
            self._sampling_runner = None

    def stop(self) -> None:
        """Closes the envs and ends recording."""
        super().stop()
        self._close_sampling()
        for out in self._outputs.values():
            out.close()


def multi_agent_ppo(config: AlgorithmConfig, process: Any = None) -> Any:
    """What a multi-agent `PPOConfig` builds: `MultiAgentPPO` (single-agent PPO's learner as
    it is) for one module every agent shares and a decentralised value, else
    `MultiModulePPO` (several modules in one compiled update, MAPPO).

    Args:
      config: a `PPOConfig` on which `multi_agent()` was called.
      process: the process setup `build()` did.
    """
    shared = len(config.policies) == 1 and not any(config.policies.values())
    if shared and not config.centralized_value:
        return MultiAgentPPO(config, process)
    return MultiModulePPO(config, process)
