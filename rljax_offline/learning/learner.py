"""`Learner`: the owner of an algorithm's train state and of the data-parallel runtime that
steps it.

It holds the `TrainState` replicated on the devices (its init program compiling on a
background thread from construction until the state is first used, so reading the data
overlaps that compile), the `DataParallel` runtime over the selected devices, and the
compiled programs it has built. `step(n, data)` runs `n` updates on materialized
(`DeviceData`: one jitted `lax.scan` with on-device sampling) or streamed data (an iterator
of global batches) and returns their metrics; `state_dict()` / `load_state_dict()` are what a
checkpoint saves and restores. The `Algorithm` facade owns one (`Algorithm.learner`); PPO and
SAC step the same state with their own programs (`DataParallel.epochs_on_device`,
`scan_on_buffer`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax

from rljax_offline.data.device import DeviceData
from rljax_offline.learning.data_parallel import DataParallel
from rljax_offline.learning.init import start_init_state, state_template
from rljax_offline.learning.spec import LearningSpec, TrainState
from rljax_offline.runtime.background import Background


class Learner:
    """The train state and the runtime that steps it (see the module docstring).

    Args:
      learning: the algorithm's `LearningSpec`.
      devices: the devices the update runs over (`data_parallel.select_devices`).
      rows_per_update: the global batch of one update, in rows.
      mode: the update's data-parallel mode (`DataParallel`'s `mode`).
      seed: the seed of the initial state.
      connector_state: the learner connector's initial state, carried in the state.
    """

    def __init__(self, learning: LearningSpec, devices: list, rows_per_update: int, *,
                 mode: str, seed: int, connector_state: Any = ()):
        self.learning = learning
        self.dp = DataParallel(learning, devices, rows_per_update, mode=mode)
        self.initial_connector_state = connector_state
        self._pending: Background | None = start_init_state(learning, seed,
                                                            connector_state=connector_state)
        self._state: TrainState | None = None
        self._scans: dict = {}

    @property
    def state(self) -> TrainState:
        """The `TrainState`, replicated on the devices. The first use waits for the init
        program left compiling in the background, and raises its error if it failed."""
        if self._pending is not None:
            state = self._pending.result()
            self._state, self._pending = self.dp.put_replicated(state), None
        return self._state

    @state.setter
    def state(self, state: TrainState) -> None:
        if self._pending is not None:  # replaced unseen: its thread ends, unneeded
            self._pending.wait()
            self._pending = None
        self._state = state

    @property
    def connector_state(self) -> Any:
        """The learner connector state, without waiting for a pending init program (its
        state starts from the pipeline's fresh one)."""
        if self._pending is not None:
            return self.initial_connector_state
        return self.state.connector_state

    def step(self, num_updates: int, data: DeviceData | Iterator[dict],
             sample_unit: str = "timesteps", window: int | None = None) -> dict:
        """`num_updates` updates on `data`, dispatched: materialized `DeviceData` (sampled on
        the devices by `sample_unit`, in windows of `window` steps for "windows", the scan
        program compiled once per count and unit) or an iterator of global batches. Returns
        the metrics (device arrays, ready when the updates are done)."""
        if isinstance(data, DeviceData):
            key = (num_updates, sample_unit, window)
            if key not in self._scans:
                self._scans[key] = self.dp.scan_on_device(num_updates, sample_unit, window)
            self.state, metrics = self._scans[key](self.state, data)
        else:
            self.state, metrics = self.dp.stream_updates(self.state, data, num_updates)
        return metrics

    def put_connector_state(self, connector_state: Any) -> None:
        """The state's learner connector state replaced (put on the devices)."""
        self.state = self.state._replace(
            connector_state=self.dp.put_replicated(connector_state))

    def template(self) -> TrainState:
        """Zeros of the state's structure, shapes and dtypes, made without compiling
        (`learning.init.state_template`): what loading a saved state reads into."""
        return state_template(self.learning, jax.device_get(self.connector_state))

    def state_dict(self) -> TrainState:
        """The state on the host: what a checkpoint saves."""
        return jax.device_get(self.state)

    def load_state_dict(self, state: TrainState) -> None:
        """Takes a saved state (host arrays), replicated on the devices."""
        self.state = self.dp.put_replicated(state)
