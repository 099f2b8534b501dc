"""`MultiAgentPPO`: IPPO with parameter sharing, what `PPOConfig().multi_agent().build()`
makes: PPO's learner as it is, its rollouts sampled from a multi-agent env.

Every agent maps to one module (RLlib's default, `default_policy`): each iteration samples
whole multi-agent episodes with the exploring module from `num_envs_per_env_runner` env
copies (`MultiAgentEnvRunner`), and every agent's episode is a single-agent episode of the
module on the agent's own timeline, with its own rewards, so GAE, the advantage
standardization and the epochs of minibatches are single-agent PPO's, unchanged. With
`count_steps_by="env_steps"` (RLlib's default) the train batch holds
`train_batch_size_per_learner` steps of every agent; with `"agent_steps"` that many rows.
The episode metrics are the team's (the sum over agents); evaluation runs the greedy module
in the multi-agent env. With `offline_data(output=...)` every whole multi-agent episode
sampled (`<output>/sampled/`) and evaluated (`<output>/evaluation/`) is recorded in the
multi-agent Parquet format (`acting.multi_agent_episode_output`): IPPO's replay, what the
medium-replay data sets are made of. With `init_policy_from` (a multi-agent checkpoint) the
module starts from the policy of the checkpoint's module of the same id.

Several modules (one per agent, or per kind of agent) and a centralised value (MAPPO,
`centralized_value=True`) train in `ppo.multi_module.MultiModulePPO`;
`ppo.multi_module.multi_agent_ppo`, what `PPOConfig.build()` calls for a multi-agent config,
picks the class.
"""

from __future__ import annotations

from typing import Any

import jax

from rljax_offline.acting.env_runner import SAMPLING, stream_seed
from rljax_offline.acting.multi_agent_actor import ModuleActor
from rljax_offline.acting.multi_agent_episode_output import MultiAgentEpisodeOutput
from rljax_offline.acting.multi_agent_evaluator import MultiAgentEvaluator
from rljax_offline.acting.multi_agent_runner import MultiAgentEnvRunner, probe_agent_spaces
from rljax_offline.algorithms.config import AlgorithmConfig, ConfigError
from rljax_offline.algorithms.multi_agent_modules import agent_mapping, build_modules
from rljax_offline.algorithms.ppo.algorithm import PPO
from rljax_offline.algorithms.ppo.multi_agent_fine_tuning import module_policy_starts
from rljax_offline.envs.make import multi_agent_env_factory

__all__ = ["MultiAgentPPO", "check_multi_agent_ppo"]


def check_multi_agent_ppo(config: AlgorithmConfig) -> None:
    """One-line `ConfigError`s for what multi-agent PPO does not do.

    Args:
      config: a multi-agent `PPOConfig`.
    """
    name = type(config).__name__
    if config.input_ is not None:
        raise ConfigError(f"{name}.multi_agent(): multi-agent PPO samples its own rollouts "
                          "(input_ is offline algorithms' data); to start from an offline "
                          "run use training(init_policy_from=<its checkpoint>)")
    if config.init_policy_from is not None:
        raise ConfigError(f"{name}: init_policy_from is applied by PPOConfig.build(); build "
                          "multi-agent PPO with config.build()")
    if config.output is not None and not config.output_write_episodes:
        raise ConfigError(f"{name}.offline_data(output_write_episodes=False): multi-agent "
                          "PPO records whole multi-agent episodes")
    if config.num_processes not in (None, 1):
        raise ConfigError(f"{name}.multi_agent(): multi-agent training runs on one process "
                          "(any number of its devices)")


class MultiAgentPPO(PPO):
    """IPPO with one shared module (see the module docstring).

    Args:
      config: a `PPOConfig` on which `multi_agent()` was called, with one module.
      process: the process setup `build()` did.
    """

    _sampling_runner: MultiAgentEnvRunner | None = None
    _evaluator: MultiAgentEvaluator | None = None
    _evaluation_actor: ModuleActor | None = None

    def __init__(self, config: AlgorithmConfig, process: Any = None):
        if len(config.policies) != 1 or any(config.policies.values()):
            raise ConfigError(f"{type(config).__name__}.multi_agent(): multi-agent PPO trains "
                              "one module every agent shares (IPPO with parameter sharing); "
                              f"got policies {config.policies}")
        if config.centralized_value:
            raise ConfigError(f"{type(config).__name__}: centralized_value=True is "
                              "MultiModulePPO's (build with config.build())")
        check_multi_agent_ppo(config)
        self.env_fn = multi_agent_env_factory(config.env, config.env_config)
        _, obs_spaces, act_spaces = probe_agent_spaces(self.env_fn)
        self.mapping = agent_mapping(config)
        (self.module_id, module), = build_modules(config, obs_spaces, act_spaces).items()
        self.module_setup = module
        self._module_spaces = module.gym_spaces
        self.agents_per_module = len(module.agents)
        super().__init__(config, process)

    def fine_tune_from(self, path: str) -> None:
        """The shared module's policy weights from the multi-agent checkpoint at `path`
        (its module of the same id: `ppo.multi_agent_fine_tuning`); the value network
        starts fresh.

        Args:
          path: a multi-agent checkpoint with a module of this module's id.
        """
        params = jax.device_get(self.state.params)
        policy = module_policy_starts(path, {self.module_id: self.module_setup},
                                      {self.module_id: params})[self.module_id]
        self.state = self.dp.put_replicated(self.state._replace(
            params={**params, "policy": policy}))
        self.fine_tuned_from = path

    def _gym_spaces(self) -> tuple:
        return self._module_spaces

    @property
    def rollout_rows(self) -> int:
        """Agent steps of one train batch (`count_steps_by`, see the module docstring)."""
        per_agent = self.agents_per_module if self.config.count_steps_by == "env_steps" else 1
        return self.config.train_batch_size_per_learner * per_agent

    def sampled_env_steps(self, chunks: list, finished: list) -> int:
        """Env steps of the whole episodes sampled (each holds every agent's steps)."""
        return sum(env_steps for _, env_steps in finished)

    def _module_actor(self, explore: bool) -> ModuleActor:
        """The module's actor (compiled once; `set_params` gives it the current params);
        the exploring one also returns what the runner records for PPO's loss."""
        return ModuleActor(self.policy(), self.module_id, explore, outputs=explore)

    def sample_steps(self, num_steps: int, lookback: int = 0):
        """Whole multi-agent episodes with the exploring module until they hold `num_steps`
        agent steps: `(every agent's episode, [(team return, env steps)] per episode)`."""
        c = self.config
        if self._sampling_actor is None:
            self._sampling_actor = self._module_actor(explore=True)
        self._sampling_actor.set_params(jax.device_get(self.state.params))
        if self._sampling_runner is None:
            self._sampling_runner = MultiAgentEnvRunner(
                self.env_fn, {self.module_id: self._sampling_actor},
                agent_to_module_mapping_fn=self.mapping, num_envs=c.num_envs_per_env_runner,
                seed=stream_seed(c.seed, SAMPLING, self.iteration))
        chunks, finished = [], []
        while sum(len(ep) for ep in chunks) < num_steps:
            episodes = self._sampling_runner.sample(c.num_envs_per_env_runner)
            self.record("sampled", episodes)
            for ma in episodes:
                chunks.extend(ma.agent_episodes.values())
                finished.append((ma.get_return(), ma.env_steps()))
        return chunks, finished

    def record(self, group: str, episodes: list) -> None:
        """With `offline_data(output=...)`: the whole multi-agent episodes `episodes` to
        `<output>/<group>/` (see the module docstring)."""
        if self.config.output is None:
            return
        if group not in self._outputs:
            self._outputs[group] = MultiAgentEpisodeOutput(self.config, group)
        self._outputs[group].add(episodes)

    def evaluate(self, num_episodes: int | None = None) -> dict:
        """The greedy module in the multi-agent env: the team's `env_runners` metrics."""
        c = self.config
        if self._evaluation_actor is None:
            self._evaluation_actor = self._module_actor(explore=c.evaluation_explore)
            self._evaluator = MultiAgentEvaluator(self.env_fn, self.mapping,
                                                  max_envs=c.evaluation_num_envs, seed=c.seed)
        self._evaluation_actor.set_params(jax.device_get(self.state.params))
        return self._evaluator.evaluate({self.module_id: self._evaluation_actor},
                                        num_episodes or c.evaluation_duration,
                                        on_episodes=lambda eps: self.record("evaluation", eps))

    def stop(self) -> None:
        super().stop()
        if self._sampling_runner is not None:
            self._sampling_runner.close()
            self._sampling_runner = None
        if self._evaluator is not None:
            self._evaluator.close()
