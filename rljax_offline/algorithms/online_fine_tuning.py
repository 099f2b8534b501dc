"""`OnlineFineTuning`: an offline algorithm (Cal-QL, CQL) trained on in the env with its own
losses, the way Cal-QL is meant to be fine-tuned (Nakamoto et al. 2023): built by
`SomeConfig().training(online_fine_tuning=True, init_from=<its checkpoint>)`
(`algorithms.fine_tuning_options`).

The learner is the offline algorithm's, unchanged: the same spec, losses and optimizers,
loaded from the checkpoint (weights, optimizer states, update count, fitted connector
state: `restore_from_path(..., COMPONENT_LEARNER)` but the random key, the run's own). What
changes is where each update's rows come from: the online facade's sampling
(`algorithms.online`) and `MixedReplay`, which mixes the offline rows with the online replay
in every minibatch.

Against the other path, SAC started from the checkpoint (`SACConfig().training(init_from=...)`):
that one keeps the weights and drops the regulariser and the data. The measurements of both
on Pendulum are on the zoo's benchmark page.
"""

from __future__ import annotations

from rljax_offline.algorithms import checkpointing
from rljax_offline.algorithms.config import ConfigError
from rljax_offline.algorithms.mixed_replay import MixedReplay
from rljax_offline.algorithms.online import OnlineAlgorithm
from rljax_offline.constants import COMPONENT_LEARNER


class OnlineFineTuning(OnlineAlgorithm):
    """An offline algorithm fine-tuned online (see the module docstring). Build with
    `SomeConfig().training(online_fine_tuning=True)`."""

    started_from: str | None = None

    def __init__(self, config, process=None):
        super().__init__(config, process)
        if self.multi_process:
            raise ConfigError(f"{type(config).__name__}: online fine-tuning runs in one "
                              "process (its env runner and replay buffer are local); use "
                              "num_devices for several devices")

    @property
    def learner_loaded(self) -> bool:
        """Whether the learner came from a checkpoint (its connector state is fitted
        already: the offline rows are transformed with it, not fitted again)."""
        return self._restored or self.started_from is not None

    def start_from(self, path: str) -> None:
        """The learner of a checkpoint of the same algorithm (`init_from`), all of it but
        its random key: this run's seed (`debugging(seed=...)`) draws the updates' keys, so
        fine-tuning runs of several seeds from one checkpoint differ as their seeds do."""
        rng = self.state.rng
        checkpointing.restore_component(self, path, COMPONENT_LEARNER)
        self.state = self.state._replace(rng=rng)
        self.started_from = path

    def make_source(self) -> MixedReplay:
        """Fine-tuning's data: the online replay and the offline rows, mixed."""
        return MixedReplay(self.config, self.dp)
