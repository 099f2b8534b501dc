"""The usual Atari preprocessing (Mnih et al. 2015, as RLlib's `wrap_atari_for_new_api_stack`)
as gymnasium wrappers, in numpy only (no OpenCV):

no-op starts -> repeat each action `frameskip` times, max over the last two frames -> end of
life as end of episode (training only) -> FIRE after reset where the game needs it ->
grayscale and area-resized to `dim x dim`.

Frames stay `uint8` `(dim, dim, 1)`: the CNN scales them on the device (`models/cnn.py`),
so host memory, Parquet files and host-to-device copies carry a quarter of the bytes of
float32. Frame stacking is a connector piece (`connectors.frame_stack(4)`), as in RLlib's new
stack, so episodes store each frame once. Rewards are clipped by the learner connector
`clip_rewards(sign=True)`.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class NoopReset(gym.Wrapper):
    """After reset, a random number (1..`noop_max`) of no-op actions (action 0).

    Args:
      env: the ALE env.
      noop_max: the most no-op actions after a reset.
    """

    def __init__(self, env: gym.Env, noop_max: int = 30):
        super().__init__(env)
        if noop_max < 1:
            raise ValueError(f"noop_max must be >= 1, got {noop_max}")
        self.noop_max = noop_max

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        for _ in range(int(self.np_random.integers(1, self.noop_max + 1))):
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info


class MaxAndSkip(gym.Wrapper):
    """Each action repeated `skip` times; rewards summed; the observation is the pixel-wise
    max of the last two frames (Atari sprites flicker between frames).

    Args:
      env: the ALE env, made with `frameskip=1`.
      skip: how many frames each action is repeated for.
    """

    def __init__(self, env: gym.Env, skip: int = 4):
        super().__init__(env)
        if skip < 1:
            raise ValueError(f"skip must be >= 1, got {skip}")
        self.skip = skip

    def step(self, action):
        total, last_two = 0.0, []
        terminated = truncated = False
        info = {}
        for _ in range(self.skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            last_two = (last_two + [obs])[-2:]
            if terminated or truncated:
                break
        return np.max(np.stack(last_two), axis=0), total, terminated, truncated, info


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode (`terminated`), the game goes on at the next reset; reads
    the `lives` entry ALE puts into `info`. For training only: evaluate on whole games.

    Args:
      env: the ALE env.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives, self.game_over = 0, True

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = int(info.get("lives", self.lives))
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:  # only a life was lost: continue the game with a no-op
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self.lives = int(info.get("lives", 0))
        self.game_over = False
        return obs, info


class FireReset(gym.Wrapper):
    """Presses FIRE (action 1) after reset, for games that wait for it.

    Args:
      env: the ALE env; its action 1 must be FIRE (else a `ValueError`).
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        meanings = getattr(env.unwrapped, "get_action_meanings", lambda: [])()
        if len(meanings) < 2 or meanings[1] != "FIRE":
            raise ValueError(f"FireReset needs action 1 to be FIRE, got {meanings[:2]}")

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        obs, _, terminated, truncated, info = self.env.step(1)
        if terminated or truncated:
            obs, info = self.env.reset(**kwargs)
        return obs, info


def area_weights(n_in: int, n_out: int) -> np.ndarray:
    """`[n_out, n_in]` weights averaging the input pixels each output pixel covers (by
    overlap), i.e. area interpolation; rows sum to 1."""
    edges_out = np.arange(n_out + 1) * (n_in / n_out)
    lo = np.maximum(edges_out[:-1, None], np.arange(n_in)[None, :])
    hi = np.minimum(edges_out[1:, None], np.arange(n_in)[None, :] + 1)
    w = np.clip(hi - lo, 0.0, None)
    return w / w.sum(axis=1, keepdims=True)


class WarpFrame(gym.ObservationWrapper):
    """RGB frames -> `uint8` `(dim, dim, 1)` grayscale (ITU-R 601 luma), area-resized.

    Args:
      env: an env of RGB frames.
      dim: the output frames' side in pixels.
      grayscale: convert to one luma channel (False: keep the input's channels).
    """

    def __init__(self, env: gym.Env, dim: int = 84, grayscale: bool = True):
        super().__init__(env)
        shape = env.observation_space.shape
        if len(shape) != 3:
            raise ValueError(f"WarpFrame needs (h, w, c) image observations, got {shape}")
        self.grayscale = grayscale
        self._wh, self._ww = area_weights(shape[0], dim), area_weights(shape[1], dim)
        channels = 1 if grayscale else shape[2]
        self.observation_space = gym.spaces.Box(0, 255, (dim, dim, channels), np.uint8)

    def observation(self, frame):
        x = np.asarray(frame, np.float32)
        if self.grayscale:
            x = x[..., :3] @ np.array([0.299, 0.587, 0.114], np.float32)
            x = x[..., None]
        x = np.einsum("oh,hwc,pw->opc", self._wh, x, self._ww)
        return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def wrap_atari(env: gym.Env, *, dim: int = 84, frameskip: int = 4, noop_max: int = 30,
               episodic_life: bool = True, grayscale: bool = True) -> gym.Env:
    """The standard preprocessing stack. Make the ALE env with `frameskip=1` (the wrapper
    skips frames), e.g. `wrap_atari(gym.make("ALE/Pong-v5", frameskip=1))`; evaluate with
    `episodic_life=False`.

    Args:
      env: the ALE env, made with `frameskip=1`.
      dim: the frames' side after resizing (84).
      frameskip: frames each action is repeated for (max-pooled over the last two).
      noop_max: the most no-op actions after a reset.
      episodic_life: a lost life ends the episode (training only).
      grayscale: one luma channel instead of RGB.
    """
    env = NoopReset(env, noop_max)
    if frameskip > 1:
        env = MaxAndSkip(env, frameskip)
    if episodic_life:
        env = EpisodicLife(env)
    meanings = getattr(env.unwrapped, "get_action_meanings", lambda: [])()
    if len(meanings) > 1 and meanings[1] == "FIRE":
        env = FireReset(env)
    return WarpFrame(env, dim, grayscale)
