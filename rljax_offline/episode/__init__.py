"""Episodes: the finalized `Episode` pytree, its RLlib state dicts, the `EpisodeBuilder`
that runners fill step by step, padded `EpisodeBatch`es and lookback indexing; multi-agent
episodes (`MultiAgentEpisode`, `MultiAgentEpisodeBuilder`) beside them.

`__all__` is what users and algorithm authors may import from here: the episode types, the
builders that make them and the padded batches jitted code sees (`module_batches` for one
per module of multi-agent episodes). The indexing helpers (`lookback`,
`multi_agent_index`) are internal. `from rljax_offline.episode import Episode` keeps working
from the days this was one module."""

from rljax_offline.episode.batch import EpisodeBatch, EpisodeMeta, bucket_length
from rljax_offline.episode.builder import EpisodeBuilder
from rljax_offline.episode.episode import Episode, EpisodeError
from rljax_offline.episode.multi_agent import MultiAgentEpisode
from rljax_offline.episode.multi_agent_batch import module_batches
from rljax_offline.episode.multi_agent_builder import MultiAgentEpisodeBuilder

__all__ = ["Episode", "EpisodeBatch", "EpisodeBuilder", "EpisodeError", "EpisodeMeta",
           "MultiAgentEpisode", "MultiAgentEpisodeBuilder", "bucket_length", "module_batches"]
