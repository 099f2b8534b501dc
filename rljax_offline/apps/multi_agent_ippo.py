"""The behaviour policies of the mpe2 RL data sets (`mpe-ENV-ippo-KIND`): one IPPO run per
env, cached, as D4RL made its MuJoCo sets from one SAC run (`apps.mujoco_policies`).

`ippo_run` trains IPPO (`PPOConfig().multi_agent()`: one module every agent shares on
simple_spread, one per kind of agent on speaker-listener, trained together by
`MultiModulePPO`) with the settings of `benchmarks/multi_agent_ippo.py` for `env_steps` env
steps; Box actions with `normalize_actions=True` (the Gaussian in [-1, 1] units mapped onto
mpe2's [0, 1] box, actions clipped to it with their exact log-probability:
`models.distributions.clipped_gaussian`). Every sampled multi-agent episode is written to
`replay/sampled/` (`offline_data(output=...)`: the learner's rollouts), and a checkpoint
every `env_steps / num_checkpoints` env steps (the first interval split into
`IPPO_DENSE_FIRST[env]` for envs learnt fast) with the team return of its sampling policy
(exploring: the behaviour that records the data) over `checkpoint_episodes` episodes. Then,
on env seeds apart from training's:

* the expert is the checkpoint with the best evaluation, measured again over
  `eval_episodes` episodes: `ref_max_score`;
* the uniform random policy's team return is `ref_min_score`;
* the medium policy is the checkpoint whose evaluation is closest to half of the way from
  random to expert (the earliest among equals, none after the expert), measured again;
* medium-replay is the rollouts IPPO sampled up to the medium checkpoint (every episode is
  whole, so they are the first `env steps / max_cycles` episodes of `replay/sampled/`).

The cache folder holds `run.json` (written last: a folder without it is an interrupted run
and is trained again), `checkpoints/<env steps>/` and `replay/`.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rljax_offline.acting.multi_agent_actor import ModuleActor
from rljax_offline.acting.multi_agent_runner import MultiAgentEnvRunner
from rljax_offline.algorithms.algorithm import Algorithm
from rljax_offline.algorithms.ppo import PPOConfig
from rljax_offline.apps.mujoco_policies import cached_run, write_json
from rljax_offline.apps.multi_agent_datasets import (
    DEFAULT_IPPO_ENV_STEPS,
    ENVS,
    IPPO_DENSE_FIRST,
    REF_SEED,
)
from rljax_offline.apps.training_loop import checkpointed_steps

__all__ = ["IppoRun", "ippo_config", "ippo_run", "module_policies", "policy_returns"]

RUN_VERSION = 1          # bump when the IPPO recipe changes: runs of other versions kept apart
MEDIUM_FRACTION = 0.5    # the medium: half of the way from random to expert


@dataclass(frozen=True)
class IppoRun:
    """A finished, cached IPPO run: where its pieces are and what was measured.

    Attributes:
      env: the env's short name (`apps.multi_agent_datasets.ENVS`).
      seed: the run's seed.
      env_steps: its env-step budget.
      path: its cache folder.
      evaluations: `{"env_steps", "return_mean", "checkpoint"}` at each checkpoint.
      expert: the expert checkpoint's evaluation, measured again (`return_mean`,
        `return_std`, `training_return_mean`).
      medium: the medium checkpoint's, likewise.
      random_return: the uniform random policy's mean team return (`ref_min_score`).
      eval_episodes: episodes behind `random_return` and the expert's and medium's returns.
    """

    env: str
    seed: int
    env_steps: int
    path: str
    evaluations: list = field(default_factory=list)
    expert: dict = field(default_factory=dict)
    medium: dict = field(default_factory=dict)
    random_return: float = 0.0
    eval_episodes: int = 0

    def replay(self) -> str:
        """The folder of IPPO's rollouts (multi-agent Parquet)."""
        return os.path.join(self.path, "replay", "sampled")

    def replay_episodes_before(self, which: str) -> int:
        """How many of the rollouts in `replay()` IPPO sampled before the `"medium"` or
        `"expert"` checkpoint."""
        max_cycles = int(dict(ENVS[self.env].kwargs)["max_cycles"])
        return int(getattr(self, which)["env_steps"]) // max_cycles


def ippo_config(env: str, seed: int, output: str | None = None) -> PPOConfig:
    """IPPO as `benchmarks/multi_agent_ippo.py` runs it (it reaches normalised 60 on
    simple_spread in about 300k env steps; minibatches of 1,536 rows instead of 1,500 so
    they divide over 1, 2, 4 ... 512 devices), on the env `env` of
    `apps.multi_agent_datasets.ENVS` (a module per module id of its agents; Box actions
    normalised), every sampled episode recorded to `output`.

    Args:
      env: the env's short name.
      seed: the run's seed.
      output: where the rollouts go (None: not recorded).
    """
    spec = ENVS[env]
    config = (PPOConfig().environment(f"{spec.env_id}:parallel_env",
                                      env_config=dict(spec.kwargs))
              .multi_agent(policies=set(dict(spec.agent_to_module).values()),
                           policy_mapping_fn=dict(spec.agent_to_module))
              .env_runners(num_envs_per_env_runner=16, normalize_actions=spec.continuous)
              .training(lr=5e-4, train_batch_size_per_learner=2000, minibatch_size=1536,
                        num_epochs=10, gamma=0.99, lambda_=0.95, clip_param=0.2,
                        entropy_coeff=0.01, use_kl_loss=False, vf_clip_param=100.0,
                        grad_clip=10.0)
              .rl_module(model_config={"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh"})
              .evaluation(evaluation_interval=0, evaluation_explore=True)
              .debugging(seed=seed))
    return config if output is None else config.offline_data(output=output)


def module_policies(checkpoint: str) -> dict:
    """`{module_id: exploring ModuleActor}` of an IPPO checkpoint (one shared module or
    several): the sampling policies, recording `action_logp` and `action_dist_inputs`, with
    their own copies of the params.

    Args:
      checkpoint: an IPPO checkpoint folder.
    """
    algo = Algorithm.from_checkpoint(checkpoint)
    try:
        if hasattr(algo, "module_id"):   # one module every agent shares (`MultiAgentPPO`)
            return {algo.module_id: ModuleActor(algo.policy(), algo.module_id, explore=True,
                                                outputs=True)}
        return {m: ModuleActor(algo.policy(m), m, explore=True, outputs=True)
                for m in algo.module_ids}
    finally:
        algo.stop()


def policy_returns(env_fn: Any, env: str, policies: dict, num_episodes: int,
                   seed: int) -> np.ndarray:
    """Team returns of `policies` on env seeds `seed, seed + 1, ...`, `[num_episodes]`.

    Args:
      env_fn: `() -> env`.
      env: the env's short name (its agent-to-module mapping).
      policies: `{module_id: policy}`.
      num_episodes: how many episodes.
      seed: the first env seed.
    """
    runner = MultiAgentEnvRunner(env_fn, policies,
                                 agent_to_module_mapping_fn=dict(ENVS[env].agent_to_module),
                                 num_envs=min(16, num_episodes), seed=seed)
    try:
        return np.asarray([ep.get_return() for ep in runner.episodes(num_episodes)])
    finally:
        runner.close()


def run_dir(env: str, seed: int, env_steps: int, cache_dir: str) -> str:
    """The cache folder of one IPPO run (its recipe version in the name).

    Args:
      env: the env's short name.
      seed: the run's seed.
      env_steps: its env-step budget.
      cache_dir: the cache's root.
    """
    return os.path.join(cache_dir, f"mpe-{env}-ippo-seed{seed}-steps{env_steps}-v{RUN_VERSION}")


def ippo_run(env: str, env_fn: Any, *, cache_dir: str, env_steps: int = DEFAULT_IPPO_ENV_STEPS,
             seed: int = 0, eval_episodes: int = 300, num_checkpoints: int = 20,
             checkpoint_episodes: int = 64, random_returns: Any = None,
             log: Any = None) -> IppoRun:
    """The cached IPPO run of `env` for this seed and budget, trained first if the cache has
    none (see the module docstring).

    Args:
      env: the env's short name (`apps.multi_agent_datasets.ENVS`).
      env_fn: `() -> env`.
      cache_dir: the cache's root.
      env_steps: IPPO's env-step budget.
      seed: the run's seed.
      eval_episodes: episodes behind the random, medium and expert returns.
      num_checkpoints: checkpoints (and evaluations) over the run.
      checkpoint_episodes: episodes of each checkpoint's evaluation.
      random_returns: `(num_episodes, seed) -> team returns` of the uniform random policy.
      log: a callable given progress lines (None: silent).
    """
    path = run_dir(env, seed, env_steps, cache_dir)
    meta = os.path.join(path, "run.json")
    cached = cached_run(path, meta)
    if cached is not None:
        return IppoRun(**cached)
    log = log or (lambda message: None)
    evaluations = _train(env, env_fn, seed, env_steps, path, num_checkpoints,
                         checkpoint_episodes, log)
    random_return = float(np.mean(random_returns(eval_episodes, REF_SEED)))
    expert = _measure(max(evaluations, key=lambda e: e["return_mean"]), env, env_fn,
                      eval_episodes)
    target = random_return + MEDIUM_FRACTION * (expert["return_mean"] - random_return)
    medium = min((e for e in evaluations if e["env_steps"] <= expert["env_steps"]),
                 key=lambda e: (abs(e["return_mean"] - target), e["env_steps"]))
    run = IppoRun(env=env, seed=seed, env_steps=env_steps, path=path, evaluations=evaluations,
                  expert=expert, medium=_measure(medium, env, env_fn, eval_episodes),
                  random_return=random_return, eval_episodes=eval_episodes)
    write_json(meta, asdict(run))
    log(f"mpe-{env} IPPO: random {random_return:.1f}, medium "
        f"{run.medium['return_mean']:.1f} at {run.medium['env_steps']} env steps, expert "
        f"{run.expert['return_mean']:.1f} at {run.expert['env_steps']}")
    return run


def _train(env, env_fn, seed, env_steps, path, num_checkpoints, checkpoint_episodes,
           log) -> list:
    """Trains IPPO for `env_steps` env steps; a checkpoint and an evaluation of its sampling
    policy every `env_steps / num_checkpoints` env steps (denser at first:
    `IPPO_DENSE_FIRST`). Returns the evaluations."""
    algo = ippo_config(env, seed, os.path.join(path, "replay")).build()
    evaluations = []
    try:
        for steps, ckpt in checkpointed_steps(algo, os.path.join(path, "checkpoints"),
                                              env_steps, num_checkpoints,
                                              IPPO_DENSE_FIRST.get(env, 1)):
            ret = float(np.mean(policy_returns(env_fn, env, module_policies(ckpt),
                                               checkpoint_episodes, REF_SEED + 10_000 + steps)))
            evaluations.append({"env_steps": steps, "return_mean": ret, "checkpoint": ckpt})
            log(f"mpe-{env} IPPO at {steps} env steps: sampled team return {ret:.1f}")
    finally:
        algo.stop()
    return evaluations


def _measure(evaluation: dict, env: str, env_fn: Any, num_episodes: int) -> dict:
    """The checkpoint's sampling policy, measured again over `num_episodes` episodes on the
    reference seeds."""
    returns = policy_returns(env_fn, env, module_policies(evaluation["checkpoint"]),
                             num_episodes, REF_SEED)
    return {**evaluation, "return_mean": float(returns.mean()),
            "return_std": float(returns.std()), "training_return_mean": evaluation["return_mean"]}
