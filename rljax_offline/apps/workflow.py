"""RLlib's offline-data guide end to end: train a PPO expert on CartPole-v1 to 450, checkpoint
it, record episodes with its policy, clone it with BC, and fine-tune the clone with PPO.

The pieces are the library's (`PPOConfig`, `record_policy`, `BCConfig`,
`PPOConfig.training(init_policy_from=...)`); this module holds the settings that make them
quick on CartPole and the loops that time them, shared by `rljax-offline demo --full`,
`benchmarks/ppo_cartpole.py` and the tests.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from rljax_offline.algorithms.bc import BCConfig
from rljax_offline.algorithms.ppo.config import PPOConfig

ENV = "CartPole-v1"
TARGET = 450.0
MODEL = {"fcnet_hiddens": [64, 64], "fcnet_activation": "tanh"}


def cartpole_ppo_config(seed: int = 0, **training) -> PPOConfig:
    """PPO settings that reach 450 on CartPole-v1 in about 50k env steps (RLlib's tuned
    CartPole example uses lr 3e-4, 6 epochs, vf_loss_coeff 0.01 the same way). The return
    is RLlib's `env_runners/episode_return_mean` over the last 20 sampled episodes."""
    return (PPOConfig().environment(ENV)
            .env_runners(num_envs_per_env_runner=8)
            .training(**{"lr": 1e-3, "num_epochs": 6, "minibatch_size": 256,
                         "train_batch_size_per_learner": 2048, "lambda_": 0.95,
                         "vf_clip_param": 1e4, "vf_loss_coeff": 0.05, **training})
            .rl_module(model_config=MODEL)
            .reporting(metrics_num_episodes_for_smoothing=20)
            .learners(num_devices=1)
            .debugging(seed=seed))


def cartpole_bc_config(data: str, seed: int = 0, **training) -> BCConfig:
    """BC on recorded CartPole episodes, with the same network as the PPO expert so that
    PPO can fine-tune the clone."""
    return (BCConfig().environment(ENV).offline_data(input_=data)
            .training(**{"lr": 1e-3, "num_updates_per_iteration": 50,
                         "train_batch_size_per_learner": 1024, **training})
            .rl_module(model_config=MODEL)
            .learners(num_devices=1)
            .evaluation(evaluation_interval=1, evaluation_duration=10)
            .debugging(seed=seed))


class Run(NamedTuple):
    """A training run until the target: its curve `[(x, return)]`, where it got there
    (`None`: it did not), its wall time, and the part of it spent building the algorithm
    (compiling; for fine-tuning also loading the checkpoint and the value warm-up)."""

    algo: object
    curve: list
    reached_at: int | None
    seconds: float
    build_seconds: float


def train_ppo_until(config: PPOConfig, target: float = TARGET, max_env_steps: int = 150_000,
                    emit=None, min_iterations: int = 1) -> Run:
    """PPO iterations until the sampled return mean reaches `target` (and at least
    `min_iterations` ran: a curve that shows the return holding); x is env steps."""
    t0 = time.perf_counter()
    algo = config.build()
    built = time.perf_counter() - t0
    curve: list = []
    reached = None
    while algo.env_steps_sampled < max_env_steps:
        result = algo.train()
        ret = result["env_runners"]["episode_return_mean"]
        curve.append((algo.env_steps_sampled, ret))
        if emit:
            emit({"step": "ppo", "iteration": algo.iteration,
                  "env_steps": algo.env_steps_sampled, "episode_return_mean": round(ret, 1)})
        if ret >= target and reached is None:
            reached = algo.env_steps_sampled
        if reached is not None and algo.iteration >= min_iterations:
            break
    return Run(algo, curve, reached, time.perf_counter() - t0, built)


def train_bc_until(config: BCConfig, target: float = TARGET, max_iterations: int = 10,
                   emit=None) -> Run:
    """BC iterations until the evaluation return mean reaches `target`; x is updates."""
    t0 = time.perf_counter()
    algo = config.build()
    built = time.perf_counter() - t0
    curve: list = []
    reached = None
    for _ in range(max_iterations):
        result = algo.train()
        ret = result["evaluation"]["env_runners"]["episode_return_mean"]
        updates = algo.iteration * config.updates_per_iteration
        curve.append((updates, ret))
        if emit:
            emit({"step": "bc", "iteration": algo.iteration, "updates": updates,
                  "episode_return_mean": round(ret, 1)})
        if ret >= target:
            reached = updates
            break
    return Run(algo, curve, reached, time.perf_counter() - t0, built)
