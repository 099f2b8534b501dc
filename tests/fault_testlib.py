"""Shared helpers of the fault-injection tests: small real data files of every format, the
subprocess environment that imports this worktree, seeded byte mutations."""

import json
import os
import sys

import numpy as np

from rljax_offline import Episode

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "rllib_cartpole")


def subprocess_env() -> dict:
    """Environment for a child Python that imports this checkout, on CPU, quietly."""
    path = REPO + os.pathsep + os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": path, "JAX_PLATFORMS": "cpu",
            "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}


PYTHON = sys.executable


def cartpole_episodes(n: int, seed: int = 0, length: int = 30) -> list[Episode]:
    """`n` CartPole-shaped episodes with random observations and valid actions."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        T = int(rng.integers(length // 2, length + 1))
        out.append(Episode(
            observations=rng.normal(size=(T + 1, 4)).astype(np.float32),
            actions=rng.integers(0, 2, T).astype(np.int64),
            rewards=np.ones(T), terminated=True, id_=f"ep{seed}-{i}"))
    return out


def mutate(data: bytes, rng: np.random.Generator) -> bytes:
    """One seeded random mutation: flipped bits, a random run of bytes, or a truncation."""
    kind = int(rng.integers(3))
    buf = bytearray(data)
    if kind == 0:
        for _ in range(int(rng.integers(1, 4))):
            pos = int(rng.integers(len(buf)))
            buf[pos] ^= 1 << int(rng.integers(8))
    elif kind == 1:
        pos = int(rng.integers(len(buf)))
        n = int(rng.integers(1, 16))
        buf[pos:pos + n] = rng.integers(0, 256, min(n, len(buf) - pos)).astype(np.uint8).tobytes()
    else:
        del buf[int(rng.integers(len(buf))):]
    return bytes(buf)


def sample_batch_line(T: int = 5, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(T + 1, 4)).round(3)
    return json.dumps({"type": "SampleBatch", "obs": obs[:-1].tolist(),
                       "new_obs": obs[1:].tolist(), "actions": rng.integers(0, 2, T).tolist(),
                       "rewards": [1.0] * T, "dones": [False] * (T - 1) + [True],
                       "eps_id": [seed] * T})
