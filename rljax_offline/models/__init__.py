"""Networks as pure functions: the `Module` protocol every policy, value and Q network speaks,
the action distributions, RLlib's model-config keys (MLP, CNN, LSTM/GRU, initializers).

`__all__` is what algorithm authors may import from here; each name loads its module on first
use, so importing one submodule does not load the others."""

import importlib

# public name -> the submodule that defines it
_LAZY = {
    "Module": "module", "policy_module": "module", "acting_module": "module",
    "callable_module": "module",
    "make_policy": "policy", "is_recurrent": "policy",
    "mlp_network": "networks", "value_network": "networks", "discrete_q_network": "networks",
    "continuous_q_network": "networks", "ensemble": "networks",
    "actor": "actor_and_q", "q_ensemble": "actor_and_q", "tanh_mean_actor": "actor_and_q",
    "Distribution": "distributions", "categorical": "distributions",
    "diag_gaussian": "distributions", "squashed_gaussian": "distributions",
    "deterministic": "distributions", "for_space": "distributions",
    "tanh_mean_gaussian": "distributions",
    "action_scaler": "distributions",
    "LayerInits": "initializers", "layer_inits": "initializers",
    "TORCH_DEFAULT": "initializers", "MODEL_CONFIG_DEFAULTS": "model_config",
    "DefaultModelConfig": "model_config", "check_model_config": "model_config",
    "critic": "actor_critic",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{_LAZY[name]}")
    return module if name == _LAZY[name] else getattr(module, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
