"""The package layers hold (`[tool.importlinter]` in pyproject.toml; the order is in
docs/concepts/architecture.md): each package imports only the layers below it, so no two
packages import each other, and only the algorithm layer and the apps and CLI import the
`Algorithm` facade. The contract is also shown to fail: a copy of the package with one
deliberate upward import breaks it."""

import pathlib
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("importlinter", reason="import-linter is in the [dev] extra")

ROOT = pathlib.Path(__file__).resolve().parents[1]


def lint_imports(root: pathlib.Path) -> subprocess.CompletedProcess:
    """`lint-imports` on the package under `root`, with `root`'s pyproject.toml."""
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, "
            "no_logo=True))")
    return subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, timeout=300, env={"PYTHONPATH": str(root),
                                                       "PATH": "/usr/bin:/bin"})


def test_the_package_layers_hold():
    proc = lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 kept, 0 broken" in proc.stdout, proc.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    shutil.copytree(ROOT / "rljax_offline", tmp_path / "rljax_offline",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    window = tmp_path / "rljax_offline" / "acting" / "window.py"
    window.write_text(window.read_text()
                      + "\nfrom rljax_offline.algorithms.algorithm import Algorithm  # noqa\n")
    proc = lint_imports(tmp_path)
    assert proc.returncode != 0
    assert ("rljax_offline.acting is not allowed to import rljax_offline.algorithms"
            in proc.stdout), proc.stdout
