"""Recording what the env runners sample, as RLlib's `offline_data(output=...)` does: every
finished episode (training rollouts and evaluation alike) is written to Parquet in RLlib's
layout, `<output>/<env>/run-<runner>-<write>/<prefix>_<run id>_000000-0.parquet`.

Online sampling hands over *chunks* (an episode cut at the iteration's step count goes on in
the next one): chunks are joined by episode id and an episode is written once it is done, so a
file never holds half an episode. A file is finished after `output_max_rows_per_file` rows;
`flush()` (on `save()`) finishes the open one so that every episode sampled so far is on disk,
and `close()` (on `stop()`) writes the rest, or drops a file that is not full where
`output_write_remaining_data=False` (RLlib's default; ours is True: nothing recorded is lost).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rljax_offline.data.writer import EpisodeWriter
from rljax_offline.episode.episode import Episode


def env_folder(env: Any) -> str:
    """RLlib's folder name of an env: a gymnasium id, or a factory's or class's name.

    Args:
      env: a gymnasium id, a factory or a class.
    """
    return env if isinstance(env, str) else getattr(env, "__name__", type(env).__name__)


class EpisodeOutput:
    """One env-runner group's recording (see the module docstring); built from a config's
    `output*` options. `prefix` names its files (`sampled`, `evaluation`).

    Args:
      config: the algorithm config (its `output`, `output_max_rows_per_file`, ... options).
      prefix: the file names' prefix.
      runner_index: the runner index in RLlib's run-folder names.
    """

    def __init__(self, config: Any, prefix: str, runner_index: int = 1):
        self._config, self._prefix, self._index = config, prefix, runner_index
        self._writer: EpisodeWriter | None = None
        self._open: dict[str, Episode] = {}  # episode id -> its chunks so far, joined
        self.files: list[str] = []
        self.episodes_written = 0

    def _new_writer(self) -> EpisodeWriter:
        c = self._config
        return EpisodeWriter(c.output, output_write_episodes=c.output_write_episodes,
                             output_max_rows_per_file=c.output_max_rows_per_file,
                             output_compress_columns=c.output_compress_columns,
                             filesystem=c.output_filesystem,
                             filesystem_kwargs=c.output_filesystem_kwargs,
                             file_prefix=self._prefix, rllib_folders=env_folder(c.env),
                             env_runner_index=self._index)

    def add(self, chunks: Iterable[Episode]) -> None:
        """Episodes or chunks as sampled; the episodes they finish are written."""
        for chunk in chunks:
            before = self._open.pop(chunk.id_, None)
            whole = chunk if before is None else before.concat_episode(chunk)
            if not whole.is_done:
                self._open[chunk.id_] = whole
                continue
            if self._writer is None:
                self._writer = self._new_writer()
            self._writer.write(whole)
            self.episodes_written += 1

    def flush(self) -> list[str]:
        """Finishes the open file (the next episodes start a new one); every file written."""
        if self._writer is not None:
            self.files += self._writer.close()
            self._writer = None
        return list(self.files)

    def close(self) -> list[str]:
        """The end of recording: the open file is finished, or dropped where
        `output_write_remaining_data` is False; episodes still running are not written."""
        if self._writer is not None and not self._config.output_write_remaining_data:
            self.files += self._writer.abort()
            self._writer = None
        self._open.clear()
        return self.flush()
