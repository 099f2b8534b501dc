"""Exactly `train_batch_size` timesteps a batch from streamed episodes (RLlib's episode-buffer
semantics for offline episode rows): `input_read_batch_size` episodes are pulled at a time,
and an episode that does not fit is cut, its rest opening the next batch as a chunk that keeps
its lookback (`Episode.slice`), so no timestep is lost or repeated."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from rljax_offline.episode.episode import Episode


def sample_timesteps(episodes: Iterable[Episode], train_batch_size: int, *,
                     input_read_batch_size: int = 16, len_lookback_buffer: int = 0,
                     drop_last: bool = True) -> Iterator[list[Episode]]:
    """Yields lists of episode chunks holding exactly `train_batch_size` timesteps.

    Args:
      episodes: a (streamed) iterable of episodes, e.g. `iter_episodes(...)`.
      train_batch_size: timesteps per batch.
      input_read_batch_size: episodes pulled from the stream at a time.
      len_lookback_buffer: lookback the continuation chunks keep (as far as data exists).
      drop_last: drop the final batch when it is short (else yield it short).
    """
    if train_batch_size <= 0 or input_read_batch_size <= 0:
        raise ValueError("train_batch_size and input_read_batch_size must be positive")
    it = iter(episodes)
    batch: list[Episode] = []
    filled = 0
    while True:
        pulled = [ep for _, ep in zip(range(input_read_batch_size), it)]
        if not pulled:
            break
        for ep in pulled:
            while len(ep):
                room = train_batch_size - filled
                if len(ep) <= room:
                    batch.append(ep)
                    filled += len(ep)
                    ep = ep[len(ep):]
                else:
                    batch.append(ep.slice(slice(0, room)))
                    ep = ep.slice(slice(room, None), len_lookback_buffer=len_lookback_buffer)
                    filled = train_batch_size
                if filled == train_batch_size:
                    yield batch
                    batch, filled = [], 0
    if batch and not drop_last:
        yield batch
