"""MultiAgentEnvRunner vs raw mpe2 stepping: env steps per second on simple_spread_v3
(3 agents, discrete actions, max_cycles 25), both with uniform random actions. The raw loop
samples with the action spaces and calls `env.step`; the runner also calls one jitted policy
per module per step, checks observations against their spaces and builds the
`MultiAgentEpisode`s. Prints one JSON line with both rates and their ratio (the issue asks
>= 0.7). Needs the `[multiagent]` extra.

    PYTHONPATH=. python benchmarks/multi_agent_runner.py [episodes]
"""

from __future__ import annotations

import json
import sys
import time

from mpe2 import simple_spread_v3

from rljax_offline.acting.multi_agent_runner import MultiAgentEnvRunner, random_policy


def make():
    return simple_spread_v3.parallel_env(N=3, max_cycles=25, continuous_actions=False)


def raw(episodes: int) -> float:
    env = make()
    steps = 0
    t0 = time.perf_counter()
    for k in range(episodes):
        env.reset(seed=k)
        while env.agents:
            env.step({a: env.action_space(a).sample() for a in env.agents})
            steps += 1
    return steps / (time.perf_counter() - t0)


def runner(episodes: int, num_envs: int) -> float:
    r = MultiAgentEnvRunner(make, {"m": random_policy(make().action_space("agent_0"))},
                            agent_to_module_mapping_fn=lambda a, e: "m", num_envs=num_envs)
    r.sample(num_envs)  # compile
    t0 = time.perf_counter()
    steps = sum(len(ep) for ep in r.episodes(episodes))
    return steps / (time.perf_counter() - t0)


def main() -> None:
    episodes = int(sys.argv[1]) if len(sys.argv) > 1 else 80
    raw_rate = raw(episodes)
    out = {"episodes": episodes, "raw_steps_per_s": round(raw_rate)}
    for n in (1, 8):
        rate = runner(episodes, n)
        out[f"runner_num_envs_{n}_steps_per_s"] = round(rate)
        out[f"ratio_num_envs_{n}"] = round(rate / raw_rate, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
