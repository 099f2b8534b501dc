"""The multi-agent learner pipeline against the single-agent one on the same agent steps.

Data: mpe2 simple_spread_v3 (3 agents, max_cycles 25, random actions), every agent mapped to
one module. The multi-agent side times `default_multi_agent_learner(...).apply(states,
multi_agent_episodes)`: grouping the agent episodes by module, padding them into an
`EpisodeBatch`, the jitted module pipeline and the `agent_index` column. The single-agent
side times `EpisodeBatch.from_episodes(agent_episodes)` and the jitted `default_learner` on
the very same agent episodes (so the same rows and shapes): the ratio is what multi-agent
costs per agent step (the issue asks <= 2). Two pipelines: the defaults alone, and
`frame_stack(4)` + a learner mean-std filter in front. Calls alternate the two sides (the
machine's load drifts); the ratios of the best and of the median times are printed. Then
the compile count: batches of
`AsyncAgentsEnv` chunks with different agent sets through one pipeline (rows fixed).

    PYTHONPATH=. python benchmarks/multi_agent_pipeline.py [episodes] [calls]
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import gymnasium as gym
import jax
from mpe2 import simple_spread_v3

from rljax_offline.acting.multi_agent_runner import MultiAgentEnvRunner, random_policy
from rljax_offline.connectors import (
    Context,
    Spaces,
    default_learner,
    default_multi_agent_learner,
    frame_stack,
    mean_std_filter,
)
from rljax_offline.envs.async_agents import AsyncAgentsEnv
from rljax_offline.episode.batch import EpisodeBatch, bucket_length


def make():
    return simple_spread_v3.parallel_env(N=3, max_cycles=25, continuous_actions=False)


def alternating(fn_a, fn_b, calls: int) -> tuple[list, list]:
    """Seconds of `calls` calls of each, alternated call by call (after a warm-up call)."""
    jax.block_until_ready(fn_a())
    jax.block_until_ready(fn_b())
    t_a, t_b = [], []
    for _ in range(calls):
        for fn, out in ((fn_a, t_a), (fn_b, t_b)):
            t0 = time.perf_counter()
            jax.block_until_ready(fn())
            out.append(time.perf_counter() - t0)
    return t_a, t_b


def compare(episodes, pieces_of, calls: int) -> dict:
    env = make()
    agents = list(env.possible_agents)
    obs = {a: env.observation_space(a) for a in agents}
    act = {a: env.action_space(a) for a in agents}
    ma = default_multi_agent_learner(obs, act, {a: "shared" for a in agents}, *pieces_of())
    ma_state = ma.init()
    spaces = Spaces.of(obs[agents[0]], act[agents[0]])
    sa = default_learner(spaces, *pieces_of())
    sa_apply, sa_state = jax.jit(sa.apply), sa.init(spaces)
    agent_eps = [e for ep in episodes for e in ep.agent_episodes.values()]
    rows = bucket_length(len(agent_eps), "pow2", 1)

    def run_ma():
        return ma.apply(ma_state, episodes, rows=rows)[0].data

    def run_sa():
        eb = EpisodeBatch.from_episodes(agent_eps, pad_batch_to=rows)
        return sa_apply(sa_state, eb, {}, Context())[1]

    steps = sum(len(e) for e in agent_eps)
    t_ma, t_sa = alternating(run_ma, run_sa, calls)
    return {"agent_steps": steps, "rows": rows,
            "multi_agent_steps_per_s": round(steps / min(t_ma)),
            "single_agent_steps_per_s": round(steps / min(t_sa)),
            "ratio_of_best": round(min(t_ma) / min(t_sa), 3),
            "ratio_of_medians": round(statistics.median(t_ma) / statistics.median(t_sa), 3)}


def compiles_over_agent_sets(batches: int = 6) -> dict:
    env = AsyncAgentsEnv()
    agents = list(env.possible_agents)
    obs = {a: env.observation_space(a) for a in agents}
    act = {a: env.action_space(a) for a in agents}
    runner = MultiAgentEnvRunner(AsyncAgentsEnv, {"m": random_policy(gym.spaces.Discrete(2))},
                                 agent_to_module_mapping_fn=lambda a, e: "m")
    full = runner.sample(batches)
    ma = default_multi_agent_learner(obs, act, {a: "m" for a in agents})
    state, sets = ma.init(), set()
    for k, ep in enumerate(full):
        # chunks that end before the late joiner arrives or after the fast agent left
        chunk = ep[0:3] if k % 2 else ep[5:len(ep)]
        sets.add(tuple(sorted(chunk.agent_ids)))
        _, state = ma.apply(state, [chunk], rows=4)
    return {"batches": batches, "agent_sets": len(sets),
            "compiles": ma.jitted["m"]._cache_size()}


def main() -> None:
    episodes_n = int(sys.argv[1]) if len(sys.argv) > 1 else 128
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    runner = MultiAgentEnvRunner(make, {"shared": random_policy(make().action_space("agent_0"))},
                                 agent_to_module_mapping_fn=lambda a, e: "shared", num_envs=8)
    episodes = runner.sample(episodes_n)
    out = {"device": jax.devices()[0].platform, "episodes": episodes_n,
           "defaults": compare(episodes, lambda: (), calls),
           "frame_stack_mean_std": compare(
               episodes, lambda: (frame_stack(4), mean_std_filter(as_learner_connector=True)),
               calls),
           "compile_check": compiles_over_agent_sets()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
