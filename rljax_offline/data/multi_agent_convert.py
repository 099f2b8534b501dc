"""Converting multi-agent episode rows into per-module single-agent data sets (what
`rljax-offline convert` runs on a multi-agent folder).

* `to="tabular"`: `data.multi_agent_tabular`'s layout, one folder per module, one row per
  agent step with `agent_index` and `env_t`.
* `to="episodes"`: plain single-agent episode rows, one folder per module (`<output>/<module
  id>/`), each agent episode a row exactly as the multi-agent `agents/` files hold it: what
  single-agent tools (and RLlib's reader) train one module on.

Both are flat views of the multi-agent data: hanging values and env records stay in the
episode-row format. Episodes are streamed: one multi-agent episode in memory at a time, plus
a row group per module for `tabular`.

Example:
    >>> import os, tempfile
    >>> from rljax_offline.data.multi_agent_io import write_multi_agent_episodes
    >>> from rljax_offline.episode.multi_agent_builder import MultiAgentEpisodeBuilder
    >>> b = MultiAgentEpisodeBuilder("ep0", agent_to_module_mapping_fn=lambda a, e: "m_" + a)
    >>> b.add_env_reset(observations={"a": 0.0, "b": 1.0})
    >>> b.add_env_step({"a": 1.0, "b": 2.0}, {"a": 0, "b": 1}, {"a": 1.0, "b": 0.5})
    >>> src, out = tempfile.mkdtemp(), tempfile.mkdtemp()
    >>> _ = write_multi_agent_episodes([b.finalize()], src)
    >>> files = convert_multi_agent(src, out, to="episodes")
    >>> sorted(os.path.basename(os.path.dirname(f)) for f in files)
    ['m_a', 'm_b']
"""

from __future__ import annotations

from typing import Any

from rljax_offline.data.convert import _refuse_overlap
from rljax_offline.data.multi_agent_io import iter_multi_agent_episodes
from rljax_offline.data.multi_agent_tabular import write_multi_agent_tabular
from rljax_offline.data.writer import EpisodeWriter

__all__ = ["convert_multi_agent"]


def convert_multi_agent(path: str, output: str, *, to: str,
                        output_max_rows_per_file: int | None = None,
                        filesystem: Any = None) -> list[str]:
    """Writes the multi-agent data set at `path` as per-module single-agent data under
    `output`; returns the files written.

    Args:
      path: a multi-agent episode-row folder (`agents/` and `env/`).
      output: the output folder (one sub-folder per module).
      to: "episodes" (single-agent episode rows) or "tabular" (one row per agent step).
      output_max_rows_per_file: with `to="episodes"`, agent episodes per file (default: one
        file per module).
      filesystem: a pyarrow filesystem for `path` and `output`.
    """
    if to not in ("episodes", "tabular"):
        raise ValueError(f"multi-agent data converts to 'episodes' or 'tabular', got {to!r}")
    _refuse_overlap([path], str(output))
    episodes = iter_multi_agent_episodes(path, filesystem=filesystem)
    if to == "tabular":
        if output_max_rows_per_file is not None:
            raise ValueError("the multi-agent tabular layout writes one file per module: "
                             "output_max_rows_per_file applies to to='episodes'")
        return write_multi_agent_tabular(episodes, output, filesystem=filesystem)
    writers: dict = {}
    try:
        for ep in episodes:
            for a, sa in ep.agent_episodes.items():
                mid = str(sa.module_id if sa.module_id is not None else ep.module_for(a))
                if mid not in writers:
                    writers[mid] = EpisodeWriter(
                        f"{str(output).rstrip('/')}/{mid}", filesystem=filesystem,
                        output_max_rows_per_file=output_max_rows_per_file)
                writers[mid].write(sa)
    except BaseException as e:
        for w in writers.values():
            w.abort(e)
        raise
    return [f for w in writers.values() for f in w.close()]
