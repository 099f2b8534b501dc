"""Behavior cloning: MARWIL with `beta=0`, as in RLlib (`BCConfig` subclasses
`MARWILConfig`). The loss is the negative log-likelihood of the data's actions; no value
network is built. Box actions outside the space's bounds are learned as they are (a plain
Gaussian's log-probability is finite there), as RLlib's BC does: see `learners.marwil`."""

from __future__ import annotations

import dataclasses

from rljax_offline.algorithms.config import ConfigError
from rljax_offline.algorithms.marwil import MARWILConfig
from rljax_offline.algorithms.options import option, positive_float


@dataclasses.dataclass(frozen=True)
class BCConfig(MARWILConfig):
    """Behavior cloning with RLlib's names; `beta` stays 0.

    Example:
        >>> from rljax_offline import BCConfig
        >>> algo = (BCConfig().environment("CartPole-v1")
        ...         .offline_data(input_="data/cartpole")
        ...         .training(lr=1e-3, train_batch_size_per_learner=1024)).build()
        >>> result = algo.train()
    """

    algo_name = "bc"

    lr: float = option(1e-4, "training", positive_float, "learning rate")
    beta: float = option(0.0, "training", None, "must be 0 (behavior cloning)")

    def validate(self) -> None:
        super().validate()
        if self.beta != 0.0:
            raise ConfigError(f"BCConfig: beta must be 0.0 (use MARWILConfig for beta > 0), "
                              f"got {self.beta!r}")
