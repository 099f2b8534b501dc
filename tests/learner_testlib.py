"""Shared setup for the learner tests: a small CartPole policy, Adam, and expert labels."""

import gymnasium as gym
import numpy as np

from rljax_offline.experts import cartpole_expert
from rljax_offline.learners.bc import make_optimizer
from rljax_offline.models.policy import make_policy


def cartpole_bc_parts(hiddens=(64, 64), n=4096, lr=1e-3):
    """(policy, optimizer, data): `n` random observations labelled by the scripted expert."""
    policy = make_policy(gym.spaces.Box(-5, 5, (4,)), gym.spaces.Discrete(2), hiddens)
    obs = np.random.default_rng(0).normal(size=(n, 4)).astype(np.float32)
    return policy, make_optimizer(lr), {"obs": obs,
                                       "actions": cartpole_expert(obs).astype(np.int32)}
