"""Test setup: 8 fake CPU devices (set before jax is imported) and shared fixtures."""

import os
import pathlib

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]


def _find_shared() -> pathlib.Path:
    for cand in (REPO / "shared", REPO.parent / "shared", REPO.parent.parent / "shared"):
        if (cand / "fixtures").is_dir():
            return cand
    return REPO.parent / "shared"


SHARED = _find_shared()
FIXTURES = SHARED / "fixtures" / "rllib_cartpole"


@pytest.fixture(scope="session")
def rllib_fixtures() -> pathlib.Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"RLlib fixtures not found at {FIXTURES}: the shared/ folder must sit "
                    "beside the repository (as in CI)")
    return FIXTURES
