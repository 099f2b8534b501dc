"""The algorithm-agnostic learning engine: spec types, the data-parallel update, init,
optimizers, shared loss helpers and checkpoints. Nothing here names an algorithm.

`__all__` is what algorithm authors may import from here; each name loads its module on first
use, so importing one submodule does not load the others."""

import importlib

# public name -> the submodule that defines it (a submodule's own name: the submodule)
_LAZY = {
    # spec types: what an algorithm's config builds
    "AlgorithmSpec": "spec", "LearningSpec": "spec", "ActingSpec": "spec", "DataSpec": "spec",
    "Loss": "spec", "TrainState": "spec",
    # the update and the data-parallel runtime
    "BatchAxis": "update", "make_update": "update", "update_targets": "update",
    "network_subset": "update", "DataParallel": "data_parallel",
    "select_devices": "data_parallel", "prefetch_to_device": "data_parallel",
    "init_state": "init", "make_optimizer": "optim",
    # several modules in one update (multi-agent)
    "ModuleGroup": "multi_module", "group_modules": "multi_module",
    "init_multi_state": "multi_module", "make_multi_update": "multi_module",
    "check_policies_to_train": "multi_module", "unstack": "multi_module",
    # loss helpers shared by the algorithms
    "take_action": "losses", "not_terminal": "losses", "target_entropy": "losses",
    "expectile_loss": "losses", "huber": "losses", "per_example_normal": "losses",
    "per_example_uniform": "losses", "soft_td_target": "losses", "soft_actor_loss": "losses",
    "temperature_loss": "losses",
    # checkpoints
    "save_checkpoint": "checkpoint", "load_state": "checkpoint", "load_meta": "checkpoint",
    "load_file": "checkpoint",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
    return module if name == _LAZY[name] else getattr(module, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
