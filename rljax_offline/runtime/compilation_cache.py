"""JAX's persistent compilation cache, on by default: a second run of the same program
loads its compiled XLA executables from disk instead of compiling them again.

Where: `compilation_cache_dir` ("auto": `$XDG_CACHE_HOME/rljax_offline/jax`, else
`~/.cache/rljax_offline/jax`; a folder; None: off). The environment variable
`RLJAX_OFFLINE_COMPILATION_CACHE` overrides it: `0`/`off`/`false` turns it off, a path moves
it. A cache the user configured in JAX themselves is left as it is.
"""

from __future__ import annotations

import os

import jax

ENV_VAR = "RLJAX_OFFLINE_COMPILATION_CACHE"
_OFF = ("0", "off", "false", "no", "none")


def default_dir() -> str:
    """`~/.cache/rljax_offline/jax`, under `$XDG_CACHE_HOME` when that is set."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "rljax_offline", "jax")


def resolve(setting: str | None) -> str | None:
    """The cache folder for a config setting, after the environment override.

    Args:
      setting: `learners(compilation_cache_dir=...)`: "auto" (`default_dir()`), a folder, or
        None (off). `RLJAX_OFFLINE_COMPILATION_CACHE` (`ENV_VAR`) overrides it: "0" turns
        the cache off, a path moves it.

    Returns:
      The folder, or None when the cache is off.
    """
    env = os.environ.get(ENV_VAR)
    if env is not None and env.strip():
        setting = None if env.strip().lower() in _OFF else env.strip()
    if setting is None:
        return None
    return default_dir() if setting == "auto" else os.path.expanduser(setting)


def enable(setting: str | None = "auto") -> str | None:
    """Turns the cache on (every compiled program is kept, however fast it compiled).

    A folder the user already set in JAX's config wins.

    Args:
      setting: as for `resolve`.

    Returns:
      The folder in use, or None when off.
    """
    current = jax.config.jax_compilation_cache_dir
    if current:  # set by the user (or by us before): theirs wins
        return current
    folder = resolve(setting)
    if folder is None:
        return None
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:  # a read-only home: run without the cache rather than fail
        return None
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder
