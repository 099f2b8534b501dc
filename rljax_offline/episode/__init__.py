"""Episodes: the finalized `Episode` pytree, its RLlib state dicts, the `EpisodeBuilder`
that runners fill step by step, padded `EpisodeBatch`es and lookback indexing.

`from rljax_offline.episode import Episode` keeps working from the days this was one module."""

from rljax_offline.episode.episode import Episode, EpisodeError

__all__ = ["Episode", "EpisodeError"]
