"""Episodes: the finalized `Episode` pytree, its RLlib state dicts, the `EpisodeBuilder`
that runners fill step by step, padded `EpisodeBatch`es and lookback indexing."""
