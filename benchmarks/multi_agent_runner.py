"""MultiAgentEnvRunner vs raw mpe2 stepping: env steps per second on simple_spread_v3
(3 agents, discrete actions, max_cycles 25), both with uniform random actions. The raw loop
samples with the action spaces and calls `env.step`; the runner also calls one jitted policy
per module per step, checks observations against their spaces, keeps the env's `state()`
and builds the `MultiAgentEpisode`s. Prints one JSON line with both rates and their ratio
(the issue asks >= 0.7) for 1, 8 and 32 env copies, and for 32 without keeping `state()`.
Needs the `[multiagent]` extra.

    PYTHONPATH=. python benchmarks/multi_agent_runner.py [episodes] [rounds]
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


def runner(episodes: int, num_envs: int, global_state: bool) -> float:
    r = MultiAgentEnvRunner(make, {"m": random_policy(make().action_space("agent_0"))},
                            agent_to_module_mapping_fn=lambda a, e: "m", num_envs=num_envs,
                            global_state=global_state)
    r.sample(num_envs)  # compile
    t0 = time.perf_counter()
    steps = sum(len(ep) for ep in r.episodes(episodes))
    return steps / (time.perf_counter() - t0)


def main() -> None:
    """Rounds alternate raw and runner stepping (the machine's load drifts); the ratio is the
    median over rounds of runner / raw in the same round."""
    episodes = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    out: dict = {"episodes": episodes, "rounds": rounds}
    for n, gs in ((1, True), (8, True), (32, True), (32, False)):
        raws, rates = [], []
        # a multiple of n: all copies finish together (25 steps each), no step is wasted
        eps = max(episodes, 2 * n) // n * n
        for _ in range(rounds):
            raws.append(raw(eps))
            rates.append(runner(eps, n, gs))
        ratios = sorted(r / q for r, q in zip(rates, raws))
        name = f"num_envs_{n}" + ("" if gs else "_no_state")
        out[name] = {"raw_steps_per_s": round(sorted(raws)[rounds // 2]),
                     "runner_steps_per_s": round(sorted(rates)[rounds // 2]),
                     "ratio_median": round(ratios[rounds // 2], 2),
                     "ratio_range": [round(ratios[0], 2), round(ratios[-1], 2)]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
