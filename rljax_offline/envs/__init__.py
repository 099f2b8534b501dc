"""Environments and wrappers: a memory task (`StatelessCartPole`, gymnasium id
`StatelessCartPole-v1`) and the usual Atari preprocessing (`wrap_atari`), with frames kept
uint8 until they reach the device."""

from rljax_offline.envs.atari import (
    EpisodicLife,
    FireReset,
    MaxAndSkip,
    NoopReset,
    WarpFrame,
    wrap_atari,
)
from rljax_offline.envs.make import (
    STATELESS_CARTPOLE_ID,
    env_factory,
    make_env,
    multi_agent_env_factory,
    register_envs,
)
from rljax_offline.envs.stateless_cartpole import StatelessCartPole

register_envs()

__all__ = ["STATELESS_CARTPOLE_ID", "EpisodicLife", "FireReset", "MaxAndSkip", "NoopReset",
           "StatelessCartPole", "WarpFrame", "env_factory", "make_env", "multi_agent_env_factory",
           "register_envs",
           "wrap_atari"]
