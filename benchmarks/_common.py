"""Shared setup for the benchmarks: a 500-episode CartPole expert recording, made once."""

import os
import tempfile

from rljax_offline.acting.env_runner import record_expert

CACHE = os.path.join(tempfile.gettempdir(), "rljax_offline_bench")


def cartpole_recording(num_episodes: int = 500, **write_options) -> str:
    """Folder of a scripted-expert CartPole recording (reused between runs)."""
    tag = "_".join(f"{k}-{v}" for k, v in sorted(write_options.items()))
    path = os.path.join(CACHE, f"cartpole_{num_episodes}_{tag or 'default'}")
    if not os.path.isdir(path):
        record_expert("CartPole-v1", path, num_episodes=num_episodes, progress=False,
                      **write_options)
    return path
