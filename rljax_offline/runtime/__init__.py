"""Process plumbing that is no part of the maths: background threads, prefetching,
the garbage-collector pause, host memory, the compilation cache and `jax.distributed`.

`__all__` is what users may import from here; each name loads its module on first use, so
importing a submodule does not load the others."""

import importlib

# public name -> the submodule that defines it (a submodule's own name: the submodule)
_LAZY = {
    "Background": "background",
    "Prefetcher": "prefetch",
    "ProcessSetup": "setup",
    "setup": "setup",  # the module: `runtime.setup.setup(config)`
    "paused": "gc_pause",
    "fixed_mmap_threshold": "host_memory",
    "compilation_cache": "compilation_cache",
    "distributed": "distributed",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
    return module if name == _LAZY[name] else getattr(module, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
