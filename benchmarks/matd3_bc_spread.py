"""MATD3+BC against the data and against per-module TD3+BC on continuous simple_spread.

Data: mpe2 `simple_spread_v3.parallel_env(continuous_actions=True)` (3 agents, 25 steps,
Box(0, 1, (5,)) actions), recorded here by a scripted landmark-assignment heuristic (agent i
steers to landmark i: velocity command `3 * offset - velocity`) whose every action is replaced
by a uniform random one with probability `epsilon` (0.5 by default: a "medium" set between
the heuristic, about -27, and random actions, about -78). The env's `state()` is kept per env
step. Both algorithms train `updates` updates on the same data from the same seed (batch 256
env steps for MATD3+BC; TD3+BC's one shared module draws 256 steps of each agent: the same
agent steps an update) and are evaluated on 32 episodes (team return: the sum over agents).

    PYTHONPATH=. python benchmarks/matd3_bc_spread.py [episodes] [updates] [epsilon] [seed] [runs]

`runs`: a comma-separated subset of matd3_bc, matd3_bc_own (`actor_q_actions="own"`) and
td3_bc_shared (default: all three).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import MATD3BCConfig, TD3BCConfig
from rljax_offline.acting.multi_agent_runner import MultiAgentEnvRunner
from rljax_offline.envs.make import multi_agent_env_factory

ENV = "mpe2.simple_spread_v3:parallel_env"
ENV_CONFIG = {"continuous_actions": True}


def heuristic(landmark: int, epsilon: float, gain: float = 3.0):
    """The scripted policy of the agent assigned to `landmark`, epsilon-random."""

    @jax.jit
    def act(obs, key):
        vel, offset = obs[:, 0:2], obs[:, 4 + 2 * landmark:6 + 2 * landmark]
        v = gain * offset - vel
        zero = jnp.zeros_like(v[:, 0])
        a = jnp.clip(jnp.stack([zero, -v[:, 0], v[:, 0], -v[:, 1], v[:, 1]], -1), 0.0, 1.0)
        k1, k2 = jax.random.split(key)
        random = jax.random.uniform(k1, a.shape)
        return jnp.where(jax.random.uniform(k2, (a.shape[0], 1)) < epsilon, random, a)

    return act


def record(path: str, episodes: int, epsilon: float, seed: int) -> float:
    """Records the data set; returns its mean team return."""
    env_fn = multi_agent_env_factory(ENV, ENV_CONFIG)
    runner = MultiAgentEnvRunner(env_fn, {f"m{i}": heuristic(i, epsilon) for i in range(3)},
                                 agent_to_module_mapping_fn=lambda a, e: "m" + a[-1],
                                 num_envs=8, seed=seed)
    returns = []
    from rljax_offline.data.multi_agent_io import MultiAgentEpisodeWriter
    with MultiAgentEpisodeWriter(path) as writer:
        for ep in runner.episodes(episodes):
            returns.append(ep.get_return())
            writer.write(ep)
    return float(np.mean(returns))


def run(config, updates: int, per_iteration: int = 500) -> dict:
    algo = config.build()
    t0 = time.perf_counter()
    for _ in range(max(1, updates // per_iteration)):
        algo.train()
    seconds = time.perf_counter() - t0
    metrics = algo.evaluate(32)
    algo.stop()
    return {"return": round(metrics["episode_return_mean"], 2),
            "std": round(metrics["episode_return_std"], 2),
            "updates_per_s": round(updates / seconds, 1)}


def main(episodes: int = 1000, updates: int = 10_000, epsilon: float = 0.5,
         seed: int = 0, only: str = "") -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        data_return = record(tmp, episodes, epsilon, seed)
        out = {"episodes": episodes, "epsilon": epsilon, "updates": updates,
               "data_return": round(data_return, 2)}
        common = dict(num_updates_per_iteration=500)
        runs = (("matd3_bc", MATD3BCConfig()),
                ("matd3_bc_own", MATD3BCConfig().training(actor_q_actions="own")),
                ("td3_bc_shared", TD3BCConfig()))
        for name, config in runs:
            if only and name not in only.split(","):
                continue
            config = (config.environment(ENV, env_config=ENV_CONFIG).offline_data(input_=tmp)
                      .training(train_batch_size_per_learner=256, **common)
                      .evaluation(evaluation_interval=0).debugging(seed=seed)
                      .learners(num_devices=1).multi_agent())
            out[name] = run(config, updates)
            print(name, out[name], flush=True)
    return out


if __name__ == "__main__":
    args = [float(a) for a in sys.argv[1:5]]
    kwargs = dict(zip(("episodes", "updates", "epsilon", "seed"), args))
    if len(sys.argv) > 5:
        kwargs["only"] = sys.argv[5]
    for k in ("episodes", "updates", "seed"):
        if k in kwargs:
            kwargs[k] = int(kwargs[k])
    print(json.dumps(main(**kwargs)))
