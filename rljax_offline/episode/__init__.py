"""Episodes: the finalized `Episode` pytree, its RLlib state dicts, the `EpisodeBuilder`
that runners fill step by step, padded `EpisodeBatch`es and lookback indexing; multi-agent
episodes (`MultiAgentEpisode`, `MultiAgentEpisodeBuilder`) beside them.

`from rljax_offline.episode import Episode` keeps working from the days this was one module."""

from rljax_offline.episode.episode import Episode, EpisodeError
from rljax_offline.episode.multi_agent import MultiAgentEpisode
from rljax_offline.episode.multi_agent_builder import MultiAgentEpisodeBuilder

__all__ = ["Episode", "EpisodeError", "MultiAgentEpisode", "MultiAgentEpisodeBuilder"]
