"""Minari datasets in and out: `read_episodes("minari:DATASET_ID")` and `write_minari(...)`.

Minari (the Farama Foundation's successor of D4RL) stores a dataset under
`$MINARI_DATASETS_PATH/<dataset_id>/data/` (default `~/.minari/datasets`): a `metadata.json`
with the spaces and the env spec, and the episodes in one of its storage back ends (arrow,
parquet or HDF5). We go through the `minari` package for both directions, so every back end,
and Minari's own JPEG encoding of image spaces, reads exactly as `minari.load_dataset` reads it.

A Minari episode has `T + 1` observations, `T` actions, rewards, terminations and truncations
and infos stacked per observation: the same layout as our `Episode`, so the conversion copies
arrays. Infos survive when they are "simple": numbers, arrays and nested dicts of them, present
at every step; anything else is dropped on write with a warning (Minari's storage only keeps
stackable infos).

Minari is an optional extra: `pip install "rljax-offline[minari]"`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

import gymnasium as gym
import jax
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.data.validate import actions_outside_bounds
from rljax_offline.episode.episode import Episode
from rljax_offline.errors import OfflineDataError

PREFIX = "minari:"


def is_minari_input(input_: Any) -> bool:
    """True for `"minari:DATASET_ID"` (or `"minari:/path/to/dataset"`) inputs.

    Args:
      input_: any reader input.
    """
    return isinstance(input_, str) and input_.startswith(PREFIX)


def _minari():
    try:
        import minari
    except ImportError:
        raise ImportError('reading or writing Minari datasets needs the minari package: '
                          'pip install "rljax-offline[minari]"') from None
    return minari


def _data_path(source: str) -> str:
    """The folder holding `metadata.json`: a dataset id resolved as Minari does (through
    `MINARI_DATASETS_PATH`), or a path to a dataset folder or to its `data/` folder."""
    from minari.storage.datasets_root_dir import get_dataset_path

    source = source[len(PREFIX):] if is_minari_input(source) else source
    candidates = [source, os.path.join(source, "data")]
    if not os.path.isabs(source):
        candidates.append(os.path.join(str(get_dataset_path(source)), "data"))
    for path in candidates:
        if os.path.isfile(os.path.join(path, "metadata.json")):
            return path
    root = os.environ.get("MINARI_DATASETS_PATH", os.path.expanduser("~/.minari/datasets"))
    raise OfflineDataError(
        f"no Minari dataset {source!r}: expected a folder with data/metadata.json under "
        f"MINARI_DATASETS_PATH ({root}) or at that path (downloads are not made here: "
        f"`minari download {source}` first)", file=source)


def load_minari_dataset(source: str):
    """The `minari.MinariDataset` behind `"minari:DATASET_ID"`, an id, or a dataset path.

    Args:
      source: `"minari:DATASET_ID"`, a dataset id, or a path to a dataset folder.

    Returns:
      The `minari.MinariDataset`.
    """
    minari = _minari()
    path = _data_path(source)
    try:
        return minari.MinariDataset(path)
    except (ValueError, KeyError, OSError) as e:
        raise OfflineDataError(f"cannot open the Minari dataset: {e}", file=path) from None


def minari_spaces(source: str) -> tuple[gym.Space, gym.Space]:
    """`(observation_space, action_space)` of a Minari dataset.

    Args:
      source: `"minari:DATASET_ID"`, a dataset id, or a path to a dataset folder.
    """
    ds = load_minari_dataset(source)
    return ds.observation_space, ds.action_space


def _infos_per_step(infos: Any, n_obs: int, name: str, row: int) -> list[dict]:
    """Minari's stacked infos (a dict of arrays) as one dict per observation.

    Minari stacks one info per observation (the reset's first); data sets ported from elsewhere
    sometimes hold one per step only: those get an empty reset info."""
    if not infos:
        return [{} for _ in range(n_obs)]
    lengths = {len(leaf) for leaf in jax.tree_util.tree_leaves(infos)}
    if lengths == {n_obs - 1}:
        return [{}] + _infos_per_step(infos, n_obs - 1, name, row)
    if lengths != {n_obs}:
        raise OfflineDataError(f"infos have lengths {sorted(lengths)}; expected {n_obs} (one "
                               "per observation)", file=name, row=row, column="infos")
    return [jax.tree_util.tree_map(lambda a, i=i: np.asarray(a)[i], infos)
            for i in range(n_obs)]


def _episode_from_minari(data: Any, obs_space: gym.Space, act_space: gym.Space,
                         name: str) -> Episode:
    n = len(data.rewards)
    term = np.asarray(data.terminations, bool)
    trunc = np.asarray(data.truncations, bool)
    if n and (term[:-1].any() or trunc[:-1].any()):
        raise OfflineDataError("an episode is terminated or truncated before its last step",
                               file=name, row=int(data.id))
    infos = _infos_per_step(data.infos, n + 1, name, int(data.id))
    try:
        return Episode(observations=data.observations, actions=data.actions,
                       rewards=np.asarray(data.rewards), infos=infos,
                       terminated=bool(n and term[-1]), truncated=bool(n and trunc[-1]),
                       id_=f"minari-{data.id}", observation_space=obs_space,
                       action_space=act_space)
    except ValueError as e:
        raise OfflineDataError(f"episode does not fit its spaces: {e}", file=name,
                               row=int(data.id)) from None


def iter_minari_episodes(source: str, *, observation_space: Any = None,
                         process_index: int = 0, process_count: int = 1) -> Iterator[Episode]:
    """Streams the episodes of a Minari dataset, one at a time, as `Episode`s.

    Args:
      source: `"minari:DATASET_ID"`, a dataset id, or a path to a dataset folder.
      observation_space: if given, its shapes and dtypes must be the dataset's (a clear error
        otherwise).
      process_index: this process's index: it reads every `process_count`-th episode.
      process_count: how many processes share the episodes.
    """
    ds = load_minari_dataset(source)
    name = str(source)
    if observation_space is not None and sp.leaf_shapes(sp.to_spec(observation_space)) != (
            sp.leaf_shapes(sp.to_spec(ds.observation_space))):
        raise OfflineDataError(f"the dataset's observation space {ds.observation_space} is not "
                               f"the expected {observation_space}", file=name)
    indices = list(ds.episode_indices)[process_index::process_count]
    for data in ds.iterate_episodes(indices):
        yield _episode_from_minari(data, ds.observation_space, ds.action_space, name)


# ---------------------------------------------------------------------- writing


def _simple_infos(infos: tuple, n_obs: int, episode_id: str) -> dict | None:
    """Stacks per-step info dicts into Minari's layout; None (with a warning) when they are not
    the same numeric keys at every step."""
    if not any(infos):
        return None
    try:
        first = jax.tree_util.tree_structure(infos[0])
        if any(jax.tree_util.tree_structure(i) != first for i in infos):
            raise ValueError("the info keys change between steps")
        stacked = jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]),
                                         *infos)
        for leaf in jax.tree_util.tree_leaves(stacked):
            if leaf.dtype.kind not in "biuf":
                raise ValueError(f"an info value has dtype {leaf.dtype}")
        # Per-step scalars go as lists, the way Minari's DataCollector buffers them (its arrow
        # storage cannot read back a 1-d array info).
        return jax.tree_util.tree_map(lambda a: list(a) if a.ndim == 1 else a, stacked)
    except ValueError as e:
        warnings.warn(f"episode {episode_id}: infos dropped ({e}); Minari keeps only numeric "
                      "infos present at every step", stacklevel=3)
        return None


def _buffer_of(episode: Episode, index: int):
    from minari.data_collector.episode_buffer import EpisodeBuffer

    n = len(episode)  # a Minari episode has no lookback buffer: only the episode's own steps
    term = np.zeros(n, bool)
    trunc = np.zeros(n, bool)
    if n:
        term[-1], trunc[-1] = episode.is_terminated, episode.is_truncated
    infos = _simple_infos(tuple(episode.get_infos()), n + 1, episode.id_)
    return EpisodeBuffer(
        id=index, observations=jax.tree_util.tree_map(np.asarray, episode.get_observations()),
        actions=jax.tree_util.tree_map(np.asarray, episode.get_actions()),
        rewards=np.asarray(episode.get_rewards()), terminations=term, truncations=trunc,
        infos=infos if infos is not None else {})


def write_minari(episodes: Iterable[Episode], dataset_id: str, *, env: Any = None,
                 observation_space: gym.Space | None = None,
                 action_space: gym.Space | None = None, data_format: str = "arrow",
                 algorithm_name: str | None = None, author: str | None = None,
                 description: str | None = None):
    """Writes episodes as a Minari dataset that `minari.load_dataset(dataset_id)` opens.

    The dataset lands under `$MINARI_DATASETS_PATH/<dataset_id>` (Minari refuses to overwrite
    an existing id). Spaces come from `observation_space`/`action_space`, else from the
    episodes, else from `env` (an id or a gymnasium env; it is also recorded as the dataset's
    env spec, so `dataset.recover_environment()` works).

    Args:
      episodes: the episodes to write (single-agent).
      dataset_id: the Minari id (`namespace/name-v0`).
      env: the env id or instance: spaces when none are given, and the recorded env spec.
      observation_space: the dataset's observation space.
      action_space: the dataset's action space.
      data_format: Minari's storage format (`"arrow"` or `"hdf5"`).
      algorithm_name: recorded in the dataset's metadata.
      author: recorded in the dataset's metadata.
      description: recorded in the dataset's metadata.

    Returns:
      The `minari.MinariDataset`.

    Raises:
      TypeError: an item that is no `Episode`.
      ValueError: no spaces given and none found in the episodes or the env.
    """
    minari = _minari()
    dataset_id = dataset_id[len(PREFIX):] if is_minari_input(dataset_id) else dataset_id
    buffers, first = [], None
    for i, ep in enumerate(episodes):
        if not isinstance(ep, Episode):
            raise TypeError(f"write_minari takes Episodes, got {type(ep).__name__}")
        first = first or ep
        buffers.append(_buffer_of(ep, i))
    if not buffers:
        raise ValueError(f"no episodes to write to the Minari dataset {dataset_id!r}")
    observation_space = observation_space or first.observation_space
    action_space = action_space or first.action_space
    if env is None and (observation_space is None or action_space is None):
        raise ValueError("write_minari needs the spaces: pass env=, or observation_space= and "
                         "action_space= (the episodes carry none)")
    return minari.create_dataset_from_buffers(
        dataset_id, buffers, env=env, observation_space=observation_space,
        action_space=action_space, data_format=data_format, algorithm_name=algorithm_name,
        author=author, description=description)


def minari_summary(source: str) -> dict:
    """What `rljax-offline inspect` prints for a Minari dataset: counts, return and length
    statistics, spaces and the recorded env.

    Args:
      source: `"minari:DATASET_ID"`, a dataset id, or a path to a dataset folder.
    """
    ds = load_minari_dataset(source)
    returns, lengths, done = [], [], 0
    outside: dict = {}
    for data in ds.iterate_episodes():
        for column, (n, out, far) in actions_outside_bounds(data.actions,
                                                            ds.action_space).items():
            seen = outside.setdefault(column, [0, 0, 0.0])
            seen[0], seen[1], seen[2] = seen[0] + n, seen[1] + out, max(seen[2], far)
        returns.append(float(np.sum(data.rewards)))
        lengths.append(len(data.rewards))
        done += bool(len(data.rewards) and (data.terminations[-1] or data.truncations[-1]))
    r = np.asarray(returns, float)
    return {
        "dataset_id": ds.id, "episodes": len(returns), "timesteps": int(np.sum(lengths)),
        "done_episodes": int(done),
        "episode_return_mean": float(r.mean()) if len(r) else None,
        "episode_return_min": float(r.min()) if len(r) else None,
        "episode_return_max": float(r.max()) if len(r) else None,
        "episode_len_mean": float(np.mean(lengths)) if lengths else None,
        "observation_space": str(ds.observation_space), "action_space": str(ds.action_space),
        "env_id": ds.env_spec.id if ds.env_spec is not None else None,
        "actions_outside_bounds": {
            column: {"steps": out, "fraction": out / n if n else 0.0, "max_distance": far}
            for column, (n, out, far) in outside.items()},
    }
