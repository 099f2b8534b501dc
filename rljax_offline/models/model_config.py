"""RLlib's model-config keys: the table every network builder and config validates against,
and `DefaultModelConfig`, RLlib's dataclass of them.

`model_config` is a dict of RLlib's keys (`fcnet_hiddens`, `vf_share_layers`, `use_lstm`, ...);
`rl_module(model_config=...)` takes either a dict (merged into the algorithm's own defaults) or
a `DefaultModelConfig` (all of RLlib's defaults for what it leaves out, as RLlib reads it).

Two defaults differ on purpose. A plain dict starts from the algorithm's own defaults (PPO:
`[256, 256]` tanh with separate policy and value networks, `vf_share_layers=False`, which is
what checkpoints written before the key existed hold), while `DefaultModelConfig()` carries
RLlib's new-stack defaults (`vf_share_layers=True`, `fcnet_activation="tanh"`), so a config
copied from RLlib's guides builds the same module as in RLlib.

RLlib keys this package accepts only at RLlib's default value (`head_fcnet_hiddens=[]`,
`free_log_std=False`, the conv and LSTM initializers, ...) are a named error when set to
anything else, never silently ignored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from rljax_offline.models.encoders import layernorm_mode
from rljax_offline.models.initializers import MODEL_CONFIG_DEFAULTS as INITIALIZER_DEFAULTS
from rljax_offline.models.initializers import layer_inits

# RLlib's model-config keys this package implements, with the defaults a plain dict starts from.
MODEL_CONFIG_DEFAULTS: dict = {
    "fcnet_hiddens": [256, 256], "fcnet_activation": "relu",
    # RLlib's key; the placement is ours ("after_activation": d3rlpy's and CORL's)
    "fcnet_use_layernorm": False, "fcnet_layernorm_placement": "before_activation",
    "conv_filters": None,  # None: RLlib's default for the image size (models/cnn.py)
    "conv_activation": "relu",
    "use_lstm": False, "use_gru": False, "lstm_cell_size": 256, "max_seq_len": 20,
    "lstm_use_prev_action": False, "lstm_use_prev_reward": False,
    # One encoder shared by the policy and the value head (PPO, MARWIL); False: separate
    # networks. RLlib's `DefaultModelConfig` default is True (see the module docstring).
    "vf_share_layers": False,
    **INITIALIZER_DEFAULTS,  # fcnet_/head_fcnet_ kernel and bias initializers (+ _kwargs)
}

# RLlib's keys accepted only at these values (RLlib's defaults): what they would change is
# not built here.
FIXED_AT_DEFAULT: dict = {
    "head_fcnet_hiddens": [], "head_fcnet_activation": "relu",
    "free_log_std": False, "log_std_clip_param": 20.0,
    **{f"{part}_{what}_initializer{kw}": None for part in ("conv", "lstm")
       for what in ("kernel", "bias") for kw in ("", "_kwargs")},
}


def check_model_config(model_config: dict) -> dict:
    """`model_config` completed with the defaults.

    Args:
        model_config: RLlib's model-config keys (a dict).

    Raises:
        ValueError: an unknown key, a fixed key away from its default, a bad initializer or
            an unsupported combination (configs turn it into a `ConfigError`).
    """
    known = set(MODEL_CONFIG_DEFAULTS) | set(FIXED_AT_DEFAULT)
    unknown = set(model_config) - known
    if unknown:
        raise ValueError(f"unknown model_config keys {sorted(unknown)}; supported: "
                         f"{sorted(MODEL_CONFIG_DEFAULTS)}")
    for key, default in FIXED_AT_DEFAULT.items():
        if key in model_config and model_config[key] != default:
            raise ValueError(f"model_config {key}={model_config[key]!r} is not supported "
                             f"(only RLlib's default {default!r})")
    full = {**MODEL_CONFIG_DEFAULTS,
            **{k: v for k, v in model_config.items() if k not in FIXED_AT_DEFAULT}}
    if not isinstance(full["vf_share_layers"], bool):
        raise ValueError(f"model_config vf_share_layers must be True or False, got "
                         f"{full['vf_share_layers']!r}")
    if full["vf_share_layers"] and (full["use_lstm"] or full["use_gru"]):
        raise ValueError("model_config vf_share_layers=True with use_lstm / use_gru is not "
                         "supported: set vf_share_layers=False (the policy and the value "
                         "network each get their own cell)")
    layer_inits(full)
    layernorm_mode(full)
    return full


def _list(default: list) -> Any:
    return dataclasses.field(default_factory=lambda: list(default))


@dataclasses.dataclass
class DefaultModelConfig:
    """RLlib's `DefaultModelConfig` (2.60): its field names and defaults, accepted by every
    config's `rl_module(model_config=...)` as well as a dict. The defaults are RLlib's (tanh,
    `vf_share_layers=True`): a config built with it builds the module RLlib would.

    Attributes:
        fcnet_hiddens: units of the encoder's dense layers.
        fcnet_activation: their activation ("tanh", "relu", "swish", "silu", "elu",
            "linear").
        fcnet_kernel_initializer: the hidden layers' kernel initializer (torch's `nn.init`
            name, "torch_default", a flax initializer, or None: flax's draw).
        fcnet_kernel_initializer_kwargs: its keyword arguments.
        fcnet_bias_initializer: the hidden layers' bias initializer.
        fcnet_bias_initializer_kwargs: its keyword arguments.
        conv_filters: `[[channels, kernel, stride], ...]` of the CNN for image observations
            (None: RLlib's default for the image size).
        conv_activation: the CNN's activation.
        conv_kernel_initializer: accepted at None only.
        conv_kernel_initializer_kwargs: accepted at None only.
        conv_bias_initializer: accepted at None only.
        conv_bias_initializer_kwargs: accepted at None only.
        head_fcnet_hiddens: accepted at `[]` only (the heads are one linear layer).
        head_fcnet_activation: accepted at "relu" only.
        head_fcnet_kernel_initializer: the output layers' kernel initializer.
        head_fcnet_kernel_initializer_kwargs: its keyword arguments.
        head_fcnet_bias_initializer: the output layers' bias initializer.
        head_fcnet_bias_initializer_kwargs: its keyword arguments.
        free_log_std: accepted at False only (the log-std is an output of the network).
        log_std_clip_param: accepted at 20.0 only.
        vf_share_layers: one encoder under the policy and a linear value head (True), or
            separate policy and value networks (False).
        use_lstm: an LSTM after the encoder.
        max_seq_len: the learner's sequence length for recurrent modules.
        lstm_cell_size: the LSTM's units.
        lstm_use_prev_action: the previous action as an input.
        lstm_use_prev_reward: the previous reward as an input.
        lstm_kernel_initializer: accepted at None only.
        lstm_kernel_initializer_kwargs: accepted at None only.
        lstm_bias_initializer: accepted at None only.
        lstm_bias_initializer_kwargs: accepted at None only.

    Example (RLlib's offline-data guide):
        >>> from rljax_offline import DefaultModelConfig, PPOConfig
        >>> config = PPOConfig().rl_module(model_config=DefaultModelConfig(
        ...     fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True))
        >>> config.model_config["vf_share_layers"], config.model_config["fcnet_hiddens"]
        (True, [32])
    """

    fcnet_hiddens: list = _list([256, 256])
    fcnet_activation: str = "tanh"
    fcnet_kernel_initializer: str | Callable | None = None
    fcnet_kernel_initializer_kwargs: dict | None = None
    fcnet_bias_initializer: str | Callable | None = None
    fcnet_bias_initializer_kwargs: dict | None = None
    conv_filters: list | None = None
    conv_activation: str = "relu"
    conv_kernel_initializer: str | Callable | None = None
    conv_kernel_initializer_kwargs: dict | None = None
    conv_bias_initializer: str | Callable | None = None
    conv_bias_initializer_kwargs: dict | None = None
    head_fcnet_hiddens: list = _list([])
    head_fcnet_activation: str = "relu"
    head_fcnet_kernel_initializer: str | Callable | None = None
    head_fcnet_kernel_initializer_kwargs: dict | None = None
    head_fcnet_bias_initializer: str | Callable | None = None
    head_fcnet_bias_initializer_kwargs: dict | None = None
    free_log_std: bool = False
    log_std_clip_param: float = 20.0
    vf_share_layers: bool = True
    use_lstm: bool = False
    max_seq_len: int = 20
    lstm_cell_size: int = 256
    lstm_use_prev_action: bool = False
    lstm_use_prev_reward: bool = False
    lstm_kernel_initializer: str | Callable | None = None
    lstm_kernel_initializer_kwargs: dict | None = None
    lstm_bias_initializer: str | Callable | None = None
    lstm_bias_initializer_kwargs: dict | None = None

    def to_dict(self) -> dict:
        """The model-config dict: every key this package builds from, and any of the keys it
        fixes at RLlib's default that was set otherwise (the config's check names it)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {k: v for k, v in values.items()
                if k in MODEL_CONFIG_DEFAULTS or v != FIXED_AT_DEFAULT.get(k)}

