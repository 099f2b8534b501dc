"""`EpisodeBatch`: B episodes padded to a common, bucketed length; what jitted code sees.

Layout: with `L = len_lookback_buffer` (the largest lookback of the B episodes) and
`T = max_len` (the longest episode, rounded up to a bucket), every episode's step `t` sits at
column `L + t`:

* `observations`: `[B, L + T + 1, ...]` (pytree for Dict/Tuple spaces),
* `actions`, `rewards`, each `extra_model_outputs[k]`: `[B, L + T, ...]`,
* `lengths`, `lookback_lengths` (the lookback each episode really has, `<= L`), `t_started`,
  `terminated`, `truncated`: `[B]`.

Columns outside an episode's lookback and steps are padding (zeros by default); `mask`,
`obs_mask` and `lookback_mask` say which columns are real. Bucketing rounds `T` up to a power
of two (`bucket="pow2"`), so a data set with episodes of many lengths makes a jitted function
compile about `log2(longest length)` times, not once per length.

Host-only per-episode data (ids, agent/module ids, infos, custom data) lives in `meta`, outside
the pytree: JAX transforms return batches without it, and `to_episodes(meta=...)` takes it back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.episode.episode import Episode, EpisodeError
from rljax_offline.tree_util import FrozenPytree

_ARRAY_FIELDS = ("observations", "actions", "rewards", "extra_model_outputs", "lengths",
                 "lookback_lengths", "t_started", "terminated", "truncated")
_STATIC_FIELDS = ("max_len", "len_lookback_buffer", "observation_space_spec",
                  "action_space_spec")


@dataclasses.dataclass(frozen=True)
class EpisodeMeta:
    """Per-episode host data that jit cannot carry (kept for `to_episodes`).

    One entry per episode of the batch in each field, in batch order; padding episodes have
    none.

    Attributes:
      ids: the episodes' `id_`s.
      agent_ids: their `agent_id`s.
      module_ids: their `module_id`s.
      infos: their info lists (one dict per observation).
      custom_data: their `custom_data` dicts.
      multi_agent_episode_ids: the multi-agent episode each belongs to (None if none).
      start_times: their wall-clock start times.
      last_step_times: their wall-clock times of the last step.
    """

    ids: tuple
    agent_ids: tuple
    module_ids: tuple
    infos: tuple
    custom_data: tuple
    multi_agent_episode_ids: tuple
    start_times: tuple
    last_step_times: tuple


def bucket_length(n: int, bucket: str | None = "pow2", min_len: int = 8) -> int:
    """The padded length for `n` steps: the next power of two >= max(n, min_len).

    Rounding up to powers of two bounds how many shapes (and so jit compiles) a data set of
    many episode lengths produces.

    Args:
      n: the longest episode's number of steps.
      bucket: "pow2" to round up to a power of two; None for `n` itself (at least 1).
      min_len: the smallest padded length "pow2" returns (short batches share one shape).

    Returns:
      The padded length.

    Raises:
      ValueError: `bucket` is neither "pow2" nor None.

    Example:
        >>> bucket_length(5), bucket_length(9), bucket_length(9, bucket=None)
        (8, 16, 9)
    """
    if bucket is None:
        return max(n, 1)
    if bucket != "pow2":
        raise ValueError(f"bucket must be 'pow2' or None, got {bucket!r}")
    n = max(n, min_len, 1)
    return 1 << (n - 1).bit_length()


@jax.tree_util.register_pytree_with_keys_class
class EpisodeBatch(FrozenPytree):
    """Padded episodes for jitted code. Build with `EpisodeBatch.from_episodes`.

    The constructor takes the arrays as they are (no validation, so it also works on traced
    values); see the module docstring for the layout, with `B` episodes, `L` lookback
    columns and `T` padded steps.

    Args:
      observations: `[B, L + T + 1, ...]` observations (a pytree for Dict/Tuple spaces).
      actions: `[B, L + T, ...]` actions.
      rewards: `[B, L + T]` rewards.
      extra_model_outputs: column name -> `[B, L + T, ...]` array.
      lengths: `[B]` each episode's number of steps (0 for padding episodes).
      lookback_lengths: `[B]` the lookback each episode really has (`<= L`).
      t_started: `[B]` each episode's global start timestep.
      terminated: `[B]` each episode's terminated flag.
      truncated: `[B]` each episode's truncated flag.
      max_len: `T`, the padded number of steps (static).
      len_lookback_buffer: `L`, the lookback columns (static).
      observation_space_spec: the observation space's spec (static; None if unknown).
      action_space_spec: the action space's spec (static; None if unknown).
      meta: the host data `to_episodes` restores (dropped by JAX transforms).
    """

    __slots__ = _ARRAY_FIELDS + _STATIC_FIELDS + ("meta",)
    _array_fields, _static_fields, _host_fields = _ARRAY_FIELDS, _STATIC_FIELDS, ("meta",)

    def __init__(self, *, observations, actions, rewards, extra_model_outputs, lengths,
                 lookback_lengths, t_started, terminated, truncated, max_len: int,
                 len_lookback_buffer: int, observation_space_spec=None,
                 action_space_spec=None, meta: EpisodeMeta | None = None):
        values = dict(observations=observations, actions=actions, rewards=rewards,
                      extra_model_outputs=dict(extra_model_outputs), lengths=lengths,
                      lookback_lengths=lookback_lengths, t_started=t_started,
                      terminated=terminated, truncated=truncated, max_len=int(max_len),
                      len_lookback_buffer=int(len_lookback_buffer),
                      observation_space_spec=sp.to_spec(observation_space_spec),
                      action_space_spec=sp.to_spec(action_space_spec), meta=meta)
        self._init_fields(values)

    def replace(self, **changes) -> EpisodeBatch:
        """A new batch with fields changed (no re-validation; works on traced data)."""
        kwargs = {f: getattr(self, f) for f in self.__slots__}
        unknown = set(changes) - set(kwargs)
        if unknown:
            raise TypeError(f"unknown EpisodeBatch fields {sorted(unknown)}")
        kwargs.update(changes)
        return EpisodeBatch(**kwargs)

    def __repr__(self) -> str:
        return (f"EpisodeBatch(batch_size={self.batch_size}, max_len={self.max_len}, "
                f"len_lookback_buffer={self.len_lookback_buffer})")

    # ------------------------------------------------------------------ views

    @property
    def batch_size(self) -> int:
        return self.lengths.shape[0]

    @property
    def mask(self):
        """`[B, T]` True on each episode's real steps."""
        xp = jnp if isinstance(self.lengths, jax.Array) else np
        return xp.arange(self.max_len)[None, :] < self.lengths[:, None]

    @property
    def lookback_mask(self):
        """`[B, L + T]` True where the actions/rewards columns hold real data (lookback too)."""
        xp = jnp if isinstance(self.lengths, jax.Array) else np
        col = xp.arange(self.len_lookback_buffer + self.max_len)[None, :] - \
            self.len_lookback_buffer
        return (col >= -self.lookback_lengths[:, None]) & (col < self.lengths[:, None])

    @property
    def obs_mask(self):
        """`[B, L + T + 1]` True where the observations columns hold real data."""
        xp = jnp if isinstance(self.lengths, jax.Array) else np
        col = xp.arange(self.len_lookback_buffer + self.max_len + 1)[None, :] - \
            self.len_lookback_buffer
        return (col >= -self.lookback_lengths[:, None]) & (col <= self.lengths[:, None])

    def steps(self, tree: Any) -> Any:
        """The `[B, T, ...]` step columns of a `[B, L + T (+1), ...]` array pytree."""
        L, T = self.len_lookback_buffer, self.max_len
        return jax.tree_util.tree_map(lambda x: x[:, L:L + T], tree)

    # ------------------------------------------------------------------ conversion

    @classmethod
    def from_episodes(cls, episodes: Sequence[Episode], *, bucket: str | None = "pow2",
                      max_len: int | None = None, len_lookback_buffer: int | None = None,
                      pad_batch_to: int | None = None, pad_value: float = 0) -> EpisodeBatch:
        """Pads `episodes` into one batch.

        Args:
          episodes: episodes (chunks) with the same structure, shapes and dtypes.
          bucket: "pow2" rounds the padded length up to a power of two; None pads to the
            longest episode exactly.
          max_len: a fixed padded length instead (must fit every episode).
          len_lookback_buffer: lookback columns to keep (default: the largest lookback).
          pad_batch_to: add empty (length 0) episodes up to this batch size.
          pad_value: what padded positions hold.
        """
        episodes = list(episodes)
        if not episodes:
            raise EpisodeError("EpisodeBatch.from_episodes needs at least one episode")
        leaves, treedef = _flatten_episodes(episodes)
        longest = max(len(ep) for ep in episodes)
        if max_len is None:
            T = bucket_length(longest, bucket)
        else:
            T = int(max_len)
            if T < longest:
                raise EpisodeError(f"max_len={T} is shorter than the longest episode "
                                   f"({longest} steps)")
        L = max(ep.len_lookback_buffer for ep in episodes) if len_lookback_buffer is None \
            else int(len_lookback_buffer)
        B = len(episodes) if pad_batch_to is None else int(pad_batch_to)
        if B < len(episodes):
            raise EpisodeError(f"pad_batch_to={B} is smaller than the {len(episodes)} episodes")
        n = len(episodes)
        lengths = np.zeros(B, np.int32)
        lengths[:n] = [len(ep) for ep in episodes]
        lookbacks = np.zeros(B, np.int32)
        lookbacks[:n] = [min(ep.len_lookback_buffer, L) for ep in episodes]
        # Episode i's kept items start at `skip[i]` of its arrays and land at column L - keep.
        skip = [ep.len_lookback_buffer - int(k) for ep, k in zip(episodes, lookbacks)]
        n_obs = treedef.children()[0].num_leaves
        columns = [_pad_leaf(leaves, j, episodes, skip, L - lookbacks[:n], B,
                             L + T + (1 if j < n_obs else 0), pad_value)
                   for j in range(treedef.num_leaves)]
        observations, actions, rewards, extra = jax.tree_util.tree_unflatten(treedef, columns)

        def per_episode(values, dtype):
            out = np.zeros(B, dtype)
            out[:n] = values
            return out

        first = episodes[0]
        return cls(
            observations=observations, actions=actions, rewards=rewards,
            extra_model_outputs=extra, lengths=lengths, lookback_lengths=lookbacks,
            t_started=per_episode([ep.t_started for ep in episodes], np.int64),
            terminated=per_episode([ep.terminated for ep in episodes], bool),
            truncated=per_episode([ep.truncated for ep in episodes], bool),
            max_len=T, len_lookback_buffer=L,
            observation_space_spec=first.observation_space_spec,
            action_space_spec=first.action_space_spec, meta=_meta_of(episodes))

    def to_episodes(self, meta: EpisodeMeta | None = None) -> list[Episode]:
        """The episodes back (padding removed). Needs `meta`, which JAX transforms drop: pass
        the original batch's `meta` for a batch that came out of `jit` or `tree_map`."""
        meta = meta if meta is not None else self.meta
        if meta is None:
            raise EpisodeError("this EpisodeBatch has no host metadata (ids, infos): it came "
                               "out of a JAX transform; call to_episodes(meta=original.meta)")
        host = jax.tree_util.tree_map(np.asarray, self)
        L = self.len_lookback_buffer
        episodes = []
        for i in range(len(meta.ids)):
            n, k = int(host.lengths[i]), int(host.lookback_lengths[i])

            def cut(tree, extra, i=i, n=n, k=k):
                return jax.tree_util.tree_map(lambda x: x[i, L - k:L + n + extra], tree)

            episodes.append(Episode(
                observations=cut(host.observations, 1), actions=cut(host.actions, 0),
                rewards=cut(host.rewards, 0),
                infos=None if meta.infos[i] is None else list(meta.infos[i])[-(k + n + 1):],
                extra_model_outputs=cut(host.extra_model_outputs, 0),
                terminated=bool(host.terminated[i]), truncated=bool(host.truncated[i]),
                id_=meta.ids[i], agent_id=meta.agent_ids[i], module_id=meta.module_ids[i],
                multi_agent_episode_id=meta.multi_agent_episode_ids[i],
                t_started=int(host.t_started[i]), len_lookback_buffer=k,
                observation_space=self.observation_space_spec,
                action_space=self.action_space_spec, custom_data=meta.custom_data[i],
                start_time=meta.start_times[i], last_step_time=meta.last_step_times[i]))
        return episodes


def _flatten_episodes(episodes: list[Episode]) -> tuple[list[list], Any]:
    """Each episode's array leaves `(observations, actions, rewards, extra_model_outputs)`,
    flattened once, and their common tree structure (checked: one structure per batch)."""
    leaves, ref = [], None
    for i, ep in enumerate(episodes):
        if not isinstance(ep, Episode):
            raise EpisodeError(f"item {i} is a {type(ep).__name__}, not an Episode")
        if not ep.is_reset:
            raise EpisodeError(f"episode {i} ({ep.id_!r}) has no observations")
        flat, td = jax.tree_util.tree_flatten(
            (ep.observations, ep.actions, ep.rewards, ep.extra_model_outputs))
        if ref is None:
            ref = td
        elif td != ref:
            raise EpisodeError(f"episode {i} ({ep.id_!r}) has a different structure than "
                               f"episode 0: {td} vs {ref}")
        leaves.append(flat)
    return leaves, ref


def _pad_leaf(leaves: list[list], j: int, episodes: list[Episode], skip: list[int],
              first_column: np.ndarray, batch_size: int, width: int, pad_value) -> np.ndarray:
    """Leaf `j` of every episode in one preallocated `[B, width, ...]` buffer: episode i's
    items from `skip[i]` on, copied by one slice assignment to `first_column[i]` onwards."""
    item = np.shape(leaves[0][j])[1:]
    dtype = np.asarray(leaves[0][j]).dtype
    shape = (batch_size, width, *item)
    out = np.zeros(shape, dtype) if pad_value == 0 else np.full(shape, pad_value, dtype)
    for i, (flat, start, col) in enumerate(zip(leaves, skip, first_column.tolist())):
        leaf = np.asarray(flat[j])
        if leaf.shape[1:] != item:
            raise EpisodeError(f"episode {i} ({episodes[i].id_!r}) has items of shape "
                               f"{leaf.shape[1:]} where episode 0 has {item}")
        out[i, col:col + leaf.shape[0] - start] = leaf[start:]
    return out


def _meta_of(episodes: list[Episode]) -> EpisodeMeta:
    """The host data of the episodes, one tuple per field, in one pass."""
    rows = [(ep.id_, ep.agent_id, ep.module_id,
             ep.infos if ep.has_host_data else None,
             dict(ep.custom_data) if ep.has_host_data else None,
             ep.multi_agent_episode_id, ep.start_time, ep.last_step_time) for ep in episodes]
    return EpisodeMeta(*map(tuple, zip(*rows)))
