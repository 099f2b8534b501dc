"""`apps.provenance`: what a data set's `dataset.json` records about the machine that made it."""

import json
import platform

import jax
import numpy as np

from rljax_offline.apps.provenance import made_with, package_versions


def test_made_with_names_the_versions_interpreter_and_machine_installed_here():
    made = made_with()
    assert made["packages"]["jax"] == jax.__version__
    assert made["packages"]["numpy"] == np.__version__
    assert made["python"] == platform.python_version()
    assert made["machine"] == platform.machine() and made["cpu"]
    assert made["jax_device"] == jax.devices()[0].device_kind
    assert json.loads(json.dumps(made)) == made  # goes into dataset.json as it is


def test_package_versions_leaves_out_what_is_not_installed():
    versions = package_versions(("numpy", "no-such-distribution-rljax"))
    assert versions == {"numpy": np.__version__}
