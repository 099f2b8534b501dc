"""Environments and wrappers: a memory task (`StatelessCartPole`) and the usual Atari
preprocessing (`wrap_atari`), with frames kept uint8 until they reach the device."""

from rljax_offline.envs.atari import (
    EpisodicLife,
    FireReset,
    MaxAndSkip,
    NoopReset,
    WarpFrame,
    wrap_atari,
)
from rljax_offline.envs.stateless_cartpole import StatelessCartPole

__all__ = ["EpisodicLife", "FireReset", "MaxAndSkip", "NoopReset", "StatelessCartPole",
           "WarpFrame", "wrap_atari"]
