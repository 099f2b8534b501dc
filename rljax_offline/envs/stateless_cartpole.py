"""`StatelessCartPole`: CartPole-v1 without the velocities (RLlib's memory-task example env).

The observation is `(cart position, pole angle)`; a policy has to infer the velocities from
the past steps, so a recurrent (or frame-stacking) policy beats a memoryless one.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

POSITION_INDICES = (0, 2)  # x and theta of CartPole's (x, x_dot, theta, theta_dot)


class StatelessCartPole(gym.ObservationWrapper):
    """CartPole-v1 (or the given CartPole env) observing only `(x, theta)`.

    `full_observation(obs)` is not needed by users; `last_full_observation` keeps the
    unmasked state of the latest step, so a scripted expert can act on it while recording.

    Args:
      env: a CartPole env to wrap, or None / an `env_config` dict (what `EnvRunner`'s
        factories pass) to make `CartPole-v1` with it.
    """

    def __init__(self, env: gym.Env | dict | None = None):
        if env is None or isinstance(env, dict):  # EnvRunner factories pass env_config
            env = gym.make("CartPole-v1", **(env or {}))
        super().__init__(env)
        full = env.observation_space
        idx = list(POSITION_INDICES)
        self.observation_space = gym.spaces.Box(full.low[idx], full.high[idx],
                                                dtype=np.float32)
        self.last_full_observation = None

    def observation(self, observation):
        self.last_full_observation = np.asarray(observation, np.float32)
        return self.last_full_observation[list(POSITION_INDICES)]
