"""The process-wide setup a run asks for in its config, as one explicit step: joining a
multi-process run (`jax.distributed`) and the persistent XLA compilation cache.

Both change the whole process and must happen before JAX first uses a device, so they are not
hidden in a constructor: `AlgorithmConfig.build()` calls `setup(config)` first thing (and a
program that builds an `Algorithm` some other way can call it itself). Only what the config
asks for happens: `coordinator_address` / `num_processes` / `process_id` (or
`JAX_COORDINATOR_ADDRESS`) join a multi-process run, `compilation_cache_dir` (default
`"auto"`; None turns it off) opens the cache. Calling it again is harmless: a joined run and
a cache already set are kept.
"""

from __future__ import annotations

from typing import NamedTuple

import jax

from rljax_offline.runtime import compilation_cache, distributed


class ProcessSetup(NamedTuple):
    """What `setup` left in place.

    Attributes:
      multi_process: whether this process joined a multi-process run.
      compilation_cache_dir: the compilation cache folder in use (None: off).
    """

    multi_process: bool
    compilation_cache_dir: str | None

    @classmethod
    def current(cls) -> ProcessSetup:
        """The process as it is, changing nothing (for an algorithm built without
        `setup`)."""
        return cls(distributed.is_initialized(),
                   jax.config.jax_compilation_cache_dir or None)


def setup(config) -> ProcessSetup:
    """Joins the multi-process run and opens the compilation cache that `config`'s
    `learners(...)` options ask for (see the module docstring).

    Args:
      config: an `AlgorithmConfig`.

    Returns:
      What is in place now (`ProcessSetup`).
    """
    multi_process = distributed.initialize_from_config(config)
    return ProcessSetup(multi_process, compilation_cache.enable(config.compilation_cache_dir))
