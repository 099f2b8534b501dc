"""What made a data set: the library versions, interpreter and machine its `dataset.json`
records as `made_with`.

A recipe whose behaviour is learned (the MuJoCo sets' SAC run, the multi-agent IPPO sets) gives
the same data from the same seed only with the same libraries on the same kind of machine:
float rounding differs between jax/jaxlib releases and between CPUs, and a training run
amplifies the difference until its checkpoints, and so the sets, differ. When two sets made from
one recipe and seed disagree, these fields say which of those changed."""

from __future__ import annotations

import platform
from importlib import metadata

import jax

# The distributions whose versions decide what a recipe records (absent ones are left out).
PACKAGES = ("rljax-offline", "jax", "jaxlib", "numpy", "gymnasium", "mujoco", "pettingzoo",
            "mpe2")


def cpu_model() -> str:
    """The CPU's model name as Linux reports it, else what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """`{distribution: version}` for each of `names` installed here."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def made_with() -> dict:
    """The `made_with` entry of a `dataset.json`: versions, Python, CPU and JAX's device."""
    return {"packages": package_versions(), "python": platform.python_version(),
            "machine": platform.machine(), "cpu": cpu_model(),
            "jax_device": jax.devices()[0].device_kind}
