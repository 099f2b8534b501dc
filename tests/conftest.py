"""Test setup: 8 fake CPU devices (set before jax is imported) and shared fixtures."""

import os
import pathlib

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import pytest  # noqa: E402

from rljax_offline.algorithms import registry  # noqa: E402
from rljax_offline.apps.recipes import record_mixed  # noqa: E402
from rljax_offline.runtime import compilation_cache  # noqa: E402

# Every program a test compiles goes through the persistent compilation cache from the start,
# not only after the first `Algorithm` a worker builds (which turns it on for the process):
# many tests jit learners, pipelines and samplers directly, and a run of a few such files
# compiled them all again each time. A second run now loads them from disk, about 4x faster
# (tests/test_learner_core.py and five other files: 460 s -> 114 s). The whole suite gains
# little, its workers build an Algorithm early. `RLJAX_OFFLINE_COMPILATION_CACHE=0`: cold.
compilation_cache.enable("auto")

REPO = pathlib.Path(__file__).resolve().parents[1]
# RLlib-written files (see tests/fixtures/rllib_cartpole/README.md), kept inside the checkout
# so that a clone of the project alone passes its tests.
FIXTURES = REPO / "tests" / "fixtures" / "rllib_cartpole"


@pytest.fixture(scope="session")
def rllib_fixtures() -> pathlib.Path:
    assert FIXTURES.is_dir(), f"RLlib fixtures missing at {FIXTURES}"
    return FIXTURES


@pytest.fixture(scope="session")
def pendulum_mixed(tmp_path_factory) -> str:
    """The small mixed Pendulum set (`pendulum-mixed-small`) the zoo's learning tests share,
    recorded once per test process."""
    path = str(tmp_path_factory.mktemp("mixed") / "pendulum-mixed-small")
    record_mixed("pendulum-mixed-small", path)
    return path


@pytest.fixture(autouse=True)
def _registry_as_found():
    """A test that registers an algorithm leaves the registry as it found it: the CLI's help
    and choices follow from the registry, so a leaked name would change them for later tests
    in the same worker."""
    saved = dict(registry._REGISTERED)
    yield
    registry._REGISTERED.clear()
    registry._REGISTERED.update(saved)
