"""SAC (Haarnoja et al. 2018) with RLlib's names: its config and learning spec (`config`), and
the online algorithm that samples vector envs into an on-device replay buffer (`algorithm`)."""

from rljax_offline.algorithms.sac.config import SACConfig

__all__ = ["SACConfig"]
