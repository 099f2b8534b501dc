"""`AsyncAgentsEnv`: a small multi-agent env with RLlib's `MultiAgentEnv` dict API whose
agents act at different periods, so it produces what mpe2 never does: skipped env steps,
hanging actions, an agent that terminates early, one that joins late, rewards before an
agent's first observation.

* `fast` observes (and acts) every env step; it terminates at env step `fast_steps`.
* `slow` acts every step it is observed, but is observed only every `slow_period` env steps:
  in between its action hangs.
* `late` joins at env step `late_join` (it gets a reward one step before its first
  observation) and stays to the end.
* At `max_steps` the episode is truncated (`__all__`), every live agent observed.

Observation of every agent: `[env step / max_steps, own id / 3]` (Box(2,)); actions:
Discrete(2); reward: 1.0 when the action equals the parity of the env step, else 0.0.
`state()` is the global state `[env step / max_steps, number of live agents / 3]`.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

AGENTS = ("fast", "slow", "late")


class AsyncAgentsEnv:
    """See the module docstring. `reset(seed=...) -> (obs, infos)`; `step(actions) -> (obs,
    rewards, terminateds, truncateds, infos)` with `"__all__"` flags (RLlib's convention)."""

    possible_agents = AGENTS

    def __init__(self, max_steps: int = 12, slow_period: int = 3, late_join: int = 4,
                 fast_steps: int = 7):
        self.max_steps, self.slow_period = max_steps, slow_period
        self.late_join, self.fast_steps = late_join, fast_steps
        box = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        self.observation_spaces = {a: box for a in AGENTS}
        self.action_spaces = {a: gym.spaces.Discrete(2) for a in AGENTS}
        self.t = 0
        self.live: set = set()

    def observation_space(self, agent):
        return self.observation_spaces[agent]

    def action_space(self, agent):
        return self.action_spaces[agent]

    def _obs(self, agent) -> np.ndarray:
        return np.array([self.t / self.max_steps, AGENTS.index(agent) / 3], np.float32)

    def state(self) -> np.ndarray:
        return np.array([self.t / self.max_steps, len(self.live) / 3], np.float32)

    def reset(self, *, seed: int | None = None, options=None):
        self.t = 0
        self.live = {"fast", "slow"}
        return {a: self._obs(a) for a in ("fast", "slow")}, {a: {} for a in ("fast", "slow")}

    def step(self, actions: dict):
        self.t += 1
        parity = self.t % 2
        rewards = {a: float(int(act) == parity) for a, act in actions.items()}
        obs, terms, truncs = {}, {}, {}
        if "fast" in self.live:
            obs["fast"] = self._obs("fast")
            if self.t >= self.fast_steps:
                terms["fast"] = True
                self.live.discard("fast")
        if "slow" in self.live and self.t % self.slow_period == 0:
            obs["slow"] = self._obs("slow")
        if self.t == self.late_join - 1:
            rewards["late"] = rewards.get("late", 0.0) + 0.5
        if self.t >= self.late_join:
            self.live.add("late")
            obs["late"] = self._obs("late")
        if self.t >= self.max_steps:
            for a in self.live:
                obs[a] = self._obs(a)
                truncs[a] = True
            truncs["__all__"] = True
        terms["__all__"] = False
        truncs.setdefault("__all__", False)
        return obs, rewards, terms, truncs, {a: {} for a in obs}
