"""Applications built on the library: the demo, RLlib's guide workflow, dataset recipes,
scripted experts, plotting, metric reporting and the training loop the CLI runs.

`__all__` is what users may import from here; each name loads its module on first use."""

import importlib

# public name -> the submodule that defines it
_LAZY = {
    "run_training": "training_loop",
    "default_logger": "reporting", "JsonLinesLogger": "reporting",
    "TensorBoardLogger": "reporting", "WandbLogger": "reporting", "MultiLogger": "reporting",
    "record_mixed": "recipes",
    "make_dataset": "mujoco_record", "normalized_score": "mujoco_datasets",
    "make_multi_agent_dataset": "multi_agent_record",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
