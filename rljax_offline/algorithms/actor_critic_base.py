"""What the zoo's actor-critic configs share (AWAC, CRR, BCQ, PLAS, BEAR, EDAC): a learning
rate per network, so RLlib's single `lr` is refused by name; Polyak target updates under `tau`;
d3rlpy's 256-256 ReLU networks with PyTorch's draw; no recurrent form. Declared once here so a
new algorithm of this family adds only its own options and losses."""

from __future__ import annotations

import dataclasses

from rljax_offline import spaces as sp
from rljax_offline.algorithms.config import AlgorithmConfig, ConfigError
from rljax_offline.algorithms.options import dict_or_none, option, unit_interval_open_left
from rljax_offline.models.actor_and_q import check_bounded
from rljax_offline.models.initializers import TORCH_DEFAULT
from rljax_offline.models.policy import is_recurrent

__all__ = ["ActorCriticBaseConfig", "D3RLPY_MODEL", "Q_COLUMNS", "check_squashed_box",
           "refuse_unsupported"]

Q_COLUMNS = ("obs", "actions", "rewards", "new_obs", "terminateds")
D3RLPY_MODEL = {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu", **TORCH_DEFAULT}


def refuse_unsupported(config: AlgorithmConfig) -> None:
    """The one-line refusals of the family: RLlib's single `lr`, a recurrent model.

    Args:
      config: the algorithm's config.
    """
    name = type(config).__name__
    if config.lr is not None:
        raise ConfigError(f"{name}: lr is not used; set its per-network rates (actor_lr, "
                          f"critic_lr, ...) (got lr={config.lr!r})")
    if is_recurrent(config.model_config or {}):
        raise ConfigError(f"{name} has no recurrent form: drop use_lstm / use_gru")


def check_squashed_box(config: AlgorithmConfig, act_spec) -> None:
    """Box actions with finite bounds (an actor in the unit box), else a one-line error.

    Args:
      config: the algorithm's config (its class names the error).
      act_spec: the action space's spec.
    """
    name = type(config).__name__
    if not isinstance(act_spec, sp.BoxSpec):
        raise ConfigError(f"{name} needs Box actions (an actor on a bounded box), got "
                          f"{act_spec}")
    check_bounded(act_spec, name)


@dataclasses.dataclass(frozen=True)
class ActorCriticBaseConfig(AlgorithmConfig):
    """The family's shared options and refusals (see the module docstring); each algorithm
    declares its own `lr` (unused, its help naming the rates it has) and the rest."""

    tau: float = option(5e-3, "training", unit_interval_open_left,
                        "Polyak weight of the target updates")
    model_config: dict = option(D3RLPY_MODEL, "rl_module", dict_or_none,
                                "RLlib's model-config keys; d3rlpy's 256-256, PyTorch's draw")

    def validate(self) -> None:
        super().validate()
        refuse_unsupported(self)
