"""Recording what a multi-agent algorithm's env runners sample (`offline_data(output=...)` on
multi-agent PPO): every whole multi-agent episode, training rollouts and evaluation alike, in
the multi-agent Parquet format (`data.multi_agent_io`), one data set per env-runner group
under `<output>/<group>/` (`sampled`, `evaluation`), so each reads back as it is with
`read_multi_agent_episodes` or trains a multi-agent config.

It has the single-agent `EpisodeOutput`'s interface (`add`, `flush` on `save()`, `close` on
`stop()`, `files`), so the facade finishes and ends both the same way. RLlib's multi-agent
episodes cannot be written by its offline API at all; the size option keeps its name
(`output_max_rows_per_file`: with episodes as rows, as `output_write_episodes=True` means).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from rljax_offline.data.multi_agent_io import MultiAgentEpisodeWriter

__all__ = ["MultiAgentEpisodeOutput"]


class MultiAgentEpisodeOutput:
    """One env-runner group's multi-agent recording (see the module docstring).

    Args:
      config: the algorithm config (its `output`, `output_max_rows_per_file`,
        `output_filesystem`, `output_write_remaining_data` options).
      group: the env-runner group, the sub-folder of `output` (`sampled`, `evaluation`).
    """

    def __init__(self, config: Any, group: str):
        self._config, self.group = config, group
        self._writer: MultiAgentEpisodeWriter | None = None
        self._pending = 0          # episodes in the open (unfinished) file pair
        self.files: list[str] = []
        self.episodes_written = 0

    def _new_writer(self) -> MultiAgentEpisodeWriter:
        c = self._config
        return MultiAgentEpisodeWriter(os.path.join(c.output, self.group),
                                       max_episodes_per_file=c.output_max_rows_per_file,
                                       filesystem=c.output_filesystem)

    def add(self, episodes: Iterable) -> None:
        """Writes the finished ones among `episodes` (`MultiAgentEpisode`s; the runner
        hands over whole episodes)."""
        for ep in episodes:
            if not ep.is_done:
                continue
            if self._writer is None:
                self._writer = self._new_writer()
            self._writer.write(ep)
            self.episodes_written += 1
            self._pending += 1
            cap = self._config.output_max_rows_per_file
            if cap is not None and self._pending >= cap:
                self._pending = 0
        self._collect()

    def _collect(self) -> None:
        if self._writer is not None:
            self.files = self._writer.files

    def flush(self) -> None:
        """Finishes the open file pair (every episode recorded so far is on disk)."""
        if self._writer is not None:
            self._writer.flush()
            self._pending = 0
            self._collect()

    def close(self) -> None:
        """Writes the rest, or drops an unfinished pair where
        `output_write_remaining_data=False`."""
        if self._writer is None:
            return
        if self._config.output_write_remaining_data or self._pending == 0:
            self._writer.close()
        else:
            self._writer.abort()
        self._collect()
        self._writer = None
