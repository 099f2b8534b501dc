"""The options that turn an offline algorithm's config into online fine-tuning with its own
losses (`training(online_fine_tuning=True)`; Cal-QL's and CQL's), and what they change: the
algorithm `build()` makes (`algorithms.online_fine_tuning.OnlineFineTuning`), the checks, the
start from a checkpoint (`init_from`).

Why not SAC started from the checkpoint (`SACConfig().training(init_from=...)`, the other
path): SAC drops the offline algorithm's regulariser and its data at the first online step.
Cal-QL is made for fine-tuning that keeps both (Nakamoto et al. 2023, sec. 5 and appendix:
the same Cal-QL loss online, each minibatch half offline data, half online replay), and
the regulariser is what its calibration protects."""

from __future__ import annotations

import dataclasses
from typing import Any

from rljax_offline.algorithms.config import AlgorithmConfig, ConfigError
from rljax_offline.algorithms.fine_tuning import build_started
from rljax_offline.algorithms.options import boolean, option, probability
from rljax_offline.algorithms.replay_options import ReplayOptions
from rljax_offline.models.policy import is_recurrent

FINE_TUNING_CLASS = "rljax_offline.algorithms.online_fine_tuning:OnlineFineTuning"


def checkpoint_path(v) -> str | None:
    return None if v is None or (isinstance(v, str) and v) else "None or a checkpoint path"


@dataclasses.dataclass(frozen=True)
class FineTuningOptions(ReplayOptions):
    """Online fine-tuning with the algorithm's own losses (see the module docstring): each
    `train()` samples whole episodes with the exploring policy into a replay buffer (the
    `ReplayOptions`, SAC's names and defaults) and runs the updates on minibatches of which
    `offline_fraction` comes from the offline data (`offline_data(input_=...)`) and the rest
    from the buffer."""

    online_fine_tuning: bool = option(
        False, "training", boolean, "train online with this algorithm's losses: sample the "
        "env into a replay buffer, each minibatch mixing offline rows and online ones")
    offline_fraction: float = option(
        0.5, "training", probability, "online fine-tuning: the share of each minibatch "
        "drawn from the offline data (Cal-QL's 0.5; 0: online rows only)")
    init_from: str | None = option(
        None, "training", checkpoint_path, "online fine-tuning: a checkpoint of this "
        "algorithm whose learner (weights, optimizer states, fitted connector state) it "
        "starts from")

    @property
    def algorithm_class(self) -> Any:
        """Online fine-tuning's algorithm when asked for, else the offline one."""
        return FINE_TUNING_CLASS if self.online_fine_tuning else AlgorithmConfig.algorithm_class

    def validate(self) -> None:
        super().validate()
        name = type(self).__name__
        if not self.online_fine_tuning:
            if self.init_from is not None:
                raise ConfigError(f"{name}: init_from starts online fine-tuning; set "
                                  "training(online_fine_tuning=True) (offline training "
                                  "resumes with restore())")
            return
        if self.offline_fraction >= 1:
            raise ConfigError(f"{name}: offline_fraction=1 would never train on the online "
                              "rows; use offline training (online_fine_tuning=False)")
        if self.offline_fraction > 0 and self.input_ is None:
            raise ConfigError(f"{name}: online fine-tuning with offline_fraction="
                              f"{self.offline_fraction} mixes offline rows in: set "
                              "offline_data(input_=...) (or offline_fraction=0)")
        if self.seeds is not None:
            raise ConfigError(f"{name}: debugging(seeds=...) trains offline; online "
                              "fine-tuning runs one seed a run")
        if is_recurrent(self.model_config or {}):
            raise ConfigError(f"{name}: online fine-tuning has no recurrent form: drop "
                              "use_lstm / use_gru")
        if self.is_multi_agent:
            raise ConfigError(f"{name}: online fine-tuning is single-agent")

    def build(self):
        """The algorithm; with `init_from`, its learner loaded from that checkpoint
        (`OnlineFineTuning.start_from`)."""
        if self.init_from is None:
            return AlgorithmConfig.build(self)
        return build_started(self, self.init_from)
