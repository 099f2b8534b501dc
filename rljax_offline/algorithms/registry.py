"""The algorithm registry, at its old import path: it lives in `rljax_offline.registry` (a leaf
module below every package, so that loading a trained policy from a checkpoint, in
`learning.trained_policy`, can look its config class up without importing this package)."""

from rljax_offline.registry import (  # noqa: F401 - re-exported, the same objects
    _BUILTIN,
    _REGISTERED,
    builtin_config_classes,
    config_class,
    display_name,
    names,
    register,
)
