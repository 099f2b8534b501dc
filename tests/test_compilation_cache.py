"""The persistent compilation cache: on by default in the user's cache dir, moved or turned
off by the config option and by RLJAX_OFFLINE_COMPILATION_CACHE, and really written."""

import os
import pathlib
import subprocess
import sys

from rljax_offline.runtime import compilation_cache as cc

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_where_the_cache_goes(monkeypatch, tmp_path):
    monkeypatch.delenv(cc.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cc.resolve("auto") == str(tmp_path / "rljax_offline" / "jax")
    assert cc.resolve(None) is None
    assert cc.resolve("~/elsewhere") == os.path.expanduser("~/elsewhere")
    for off in ("0", "off", "False"):
        monkeypatch.setenv(cc.ENV_VAR, off)
        assert cc.resolve("auto") is None
    monkeypatch.setenv(cc.ENV_VAR, str(tmp_path / "mine"))
    assert cc.resolve(None) == str(tmp_path / "mine")  # the variable wins over the config


_PROGRAM = ("from rljax_offline.runtime import compilation_cache as cc; import jax; "
            "print(cc.enable('auto')); jax.jit(lambda x: x * 3 + 1)(2.0).block_until_ready()")


def _run(env):
    return subprocess.run([sys.executable, "-c", _PROGRAM], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu",
                               **env}, check=True).stdout.strip().splitlines()[-1]


def test_programs_are_written_to_the_cache_and_the_opt_out_writes_none(tmp_path):
    home = tmp_path / "cachehome"
    assert _run({"XDG_CACHE_HOME": str(home), cc.ENV_VAR: ""}) == str(
        home / "rljax_offline" / "jax")
    assert any((home / "rljax_offline" / "jax").iterdir())
    off = tmp_path / "off"
    assert _run({"XDG_CACHE_HOME": str(off), cc.ENV_VAR: "0"}) == "None"
    assert not off.exists()
