"""`host_memory.fixed_mmap_threshold`: applied on glibc, the user's own setting respected."""

import platform

import pytest

from rljax_offline.runtime import host_memory


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                    reason="glibc only")
def test_applies_on_glibc_and_yields_to_the_environment_variable(monkeypatch):
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert host_memory.fixed_mmap_threshold() is True
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert host_memory.fixed_mmap_threshold() is False


def test_negative_threshold_is_an_error(monkeypatch):
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    if host_memory._glibc() is None:
        pytest.skip("glibc only")
    with pytest.raises(ValueError, match="threshold"):
        host_memory.fixed_mmap_threshold(-1)
