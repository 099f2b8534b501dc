"""What every side of a comparison shares: the final evaluation, one greedy policy on the same
episodes of the env (episode i reset with seed `base + i`), so two libraries' final policies
are compared on the same start states, a paired comparison whose noise is far below that of
a level of three 10-episode evaluations (Pendulum's returns spread over -1 to -1,500 by start
state alone); the progress line each side prints after an evaluation; the `--set NAME=JSON`
options the reference workers take.

This file imports gymnasium and numpy only: d3rlpy's and CORL's workers, which must not
import rljax_offline, use it too.
"""

import json
import sys

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


def print_progress(tag: str, name: str, seed: int, done: int, total: int, mean_return: float,
                   seconds: float) -> None:
    """One line on stderr after an evaluation, `[tag] NAME seed S: done/total updates, return
    R, T s`: a run takes minutes to hours, and its result comes only at its end. The driver
    shows a worker's stderr lines that start with its tag."""
    print(f"{tag} {name} seed {seed}: {done}/{total} updates, return {mean_return:.1f}, "
          f"{seconds:.0f} s", file=sys.stderr, flush=True)


def settings_args(settings: dict | None) -> list[str]:
    """`{NAME: value}` as the `--set NAME=JSON` options `parse_settings` reads back."""
    return [arg for name, value in (settings or {}).items()
            for arg in ("--set", f"{name}={json.dumps(value)}")]


def parse_settings(items: list[str]) -> dict:
    """`--set NAME=JSON` options as `{NAME: value}`: settings away from a library's defaults."""
    settings = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: expected NAME=JSON")
        settings[name] = json.loads(value)
    return settings
