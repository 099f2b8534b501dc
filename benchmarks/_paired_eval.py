"""The final evaluation both sides of a comparison share: one greedy policy on the same
episodes of the env (episode i reset with seed `base + i`), so two libraries' final policies
are compared on the same start states, a paired comparison whose noise is far below that of
a level of three 10-episode evaluations (Pendulum's returns spread over -1 to -1,500 by start
state alone).

This file imports gymnasium and numpy only: d3rlpy's worker, which must not import
rljax_offline, uses it too.
"""

import gymnasium as gym
import numpy as np

SEED_BASE = 10_000  # episode i: reset(seed=10_000 + i), on both sides


def paired_returns(env_id: str, act, episodes: int, base: int = SEED_BASE) -> list[float]:
    """The undiscounted return of each of `episodes` episodes, `act(obs [1, ...]) -> action
    [1, ...]` acting greedily, episode i reset with seed `base + i`."""
    env = gym.make(env_id)
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=base + i)
        total, done = 0.0, False
        while not done:
            action = np.asarray(act(np.asarray(obs, np.float32)[None]))[0]
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


def paired_returns_in_context(env_id: str, start, act, episodes: int,
                              base: int = SEED_BASE) -> list[float]:
    """`paired_returns` for a policy that acts on its episode so far (Decision Transformer:
    its context and the reward just received): `start()` before each episode, then
    `act(obs [1, ...], reward) -> action [1, ...]` each step, `reward` the previous step's
    (0 on the first). The same episodes as `paired_returns`.

    Args:
      env_id: the gymnasium env.
      start: called before each episode (clears the policy's context).
      act: `(obs [1, ...], previous reward) -> action [1, ...]`.
      episodes: how many.
      base: episode i resets with seed `base + i`.
    """
    env = gym.make(env_id)
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=base + i)
        start()
        total, reward, done = 0.0, 0.0, False
        while not done:
            action = np.asarray(act(np.asarray(obs, np.float32)[None], reward))[0]
            obs, reward, terminated, truncated, _ = env.step(action)
            reward = float(reward)
            total += reward
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns
