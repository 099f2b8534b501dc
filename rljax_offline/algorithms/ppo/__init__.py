"""PPO (Schulman et al. 2017) with RLlib's names: its config and learning spec (`config`), and
the online algorithm that samples vector envs and runs epochs on the devices (`algorithm`)."""

from rljax_offline.algorithms.ppo.config import PPOConfig

__all__ = ["PPOConfig"]
