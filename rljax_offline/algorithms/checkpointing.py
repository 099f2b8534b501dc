"""An algorithm's checkpoints: everything needed to resume exactly.

A checkpoint (`learning.checkpoint`: atomic, checksummed) holds the whole `TrainState` (every
network, target copies, each optimizer state, RNG, connector state) and `meta.json` with the
format, the algorithm's registry name, its config, the iteration and the metrics history; for
streamed data also every process's stream cursor (readable numbers in the meta, the replay
connector states in `stream.msgpack`), so a restored run goes on with exactly the batches it
would have had. `from_checkpoint` rebuilds any registered algorithm from its folder.
"""

from __future__ import annotations

from typing import Any

import jax

from rljax_offline.algorithms.config import AlgorithmConfig
from rljax_offline.algorithms.offline_data import OfflineData
from rljax_offline.data.stream import StreamCursor
from rljax_offline.learning import checkpoint as ckpt
from rljax_offline.learning.trained_policy import saved_config
from rljax_offline.runtime import distributed

CHECKPOINT_FORMAT = 2
STREAM_FILE = "stream.msgpack"


def save(algo: Any, path: str, extra_files: dict[str, bytes] | None = None) -> str:
    """An atomic checkpoint of `algo` (an `Algorithm`: the facade imports this module), the
    stream cursor of streamed data included, with the algorithm's `extra_files` (name ->
    bytes, read back with `learning.checkpoint.load_file`). In a multi-process run every
    process calls it (each hands over its own cursor), process 0 alone writes, and every
    process returns once the checkpoint is complete."""
    stream, files = _stream_checkpoint(algo.data)  # a collective: before the writer check
    files = {**files, **(extra_files or {})}
    if distributed.is_writer():
        meta = {"format": CHECKPOINT_FORMAT, "algorithm": algo.algo_name,
                "config": algo.config.to_dict(), "iteration": algo.iteration,
                "history": algo.history}
        if stream is not None:
            meta["stream"] = stream
        ckpt.save_checkpoint(path, algo.state, meta, files)
    # The others wait for the write: one that went on at once could look for the checkpoint
    # (a resumed run) before it exists and train from scratch while process 0 resumes.
    distributed.barrier(f"checkpoint saved: {path}")
    return path


def _meta_of_one_run(algo: Any, path: str, other_algorithm_hint: str) -> dict:
    """The checkpoint's meta, checked to hold one run of `algo`'s algorithm: another
    algorithm is a `ValueError` ending in `other_algorithm_hint`, the stacked runs of
    `debugging(seeds=...)` a `CheckpointError` saying how to read them."""
    meta = ckpt.load_meta(path)
    saved = meta.get("algorithm", "bc")
    if saved != algo.algo_name:
        raise ValueError(f"checkpoint {path!r} holds a {saved!r} algorithm, not "
                         f"{algo.algo_name!r}{other_algorithm_hint}")
    if meta.get("seeds") is not None:
        raise ckpt.CheckpointError(
            f"checkpoint {path!r} holds the runs of seeds {meta['seeds']} in one state: "
            "continue them with Algorithm.from_checkpoint(path) (or a config with "
            "debugging(seeds=...), built, then restore(path)), or take one out with "
            "load_policy(path, seed=...)")
    return meta


def restore(algo: Any, path: str) -> None:
    """Loads a checkpoint of `algo`'s algorithm into it; training continues exactly where
    it was."""
    meta = _meta_of_one_run(algo, path, "; use Algorithm.from_checkpoint(path)")
    algo.data.forget_stream()  # a stream from before: resume from the saved cursor
    state = algo.dp.put_replicated(ckpt.load_state(path, algo.state))
    algo.data.resume_cursor = _restored_cursor(path, meta, algo.data, state.connector_state)
    algo.state = state
    algo.iteration = int(meta["iteration"])
    algo.history = list(meta.get("history", []))


# RLlib's component names (`rljax_offline.constants`) -> the parts of the `TrainState` each
# restores: the RL module is the networks (targets included, as RLlib's modules hold them);
# the learner adds the optimizer states, step, RNG, statistics and the learner connector's
# fitted state; the connectors are that fitted state (module-to-env pieces hold none).
COMPONENT_FIELDS = {
    "rl_module": ("params",),
    "learner": ("params", "opt_states", "step", "rng", "connector_state", "extra"),
    "learner_group": ("params", "opt_states", "step", "rng", "connector_state", "extra"),
    "learner_connector": ("connector_state",),
    "env_to_module_connector": ("connector_state",),
    "env_runner": ("connector_state",),
    "module_to_env_connector": (),
}


def component_of(component: str) -> str:
    """RLlib's component path (`"learner_group/learner/rl_module/default_policy"`,
    `"rl_module"`, ...) as the most specific component name it holds."""
    parts = [p for p in str(component).split("/") if p]
    for name in ("rl_module", "learner_connector", "env_to_module_connector",
                 "module_to_env_connector", "env_runner", "learner", "learner_group"):
        if name in parts:
            return name
    raise ValueError(f"restore_from_path: unknown component {component!r}; one of "
                     f"{sorted(COMPONENT_FIELDS)} (rljax_offline.constants.COMPONENT_*)")


def restore_component(algo: Any, path: str, component: str) -> None:
    """RLlib's `restore_from_path(path, component=...)`: one part of a checkpoint of the same
    algorithm into `algo` (see `COMPONENT_FIELDS`); the iteration, history and everything
    else stay. `path` may name the component inside the checkpoint as RLlib's folders do
    (`<checkpoint>/learner_group/learner/rl_module`): such a tail is dropped."""
    name = component_of(component)
    path = str(path).rstrip("/")
    while path.rsplit("/", 1)[-1] in (*COMPONENT_FIELDS, "default_policy"):
        path = path.rsplit("/", 1)[0]
    _meta_of_one_run(algo, path, ": restore_from_path loads a component of the same "
                     "algorithm (a policy of another one starts training through "
                     "init_policy_from / init_from)")
    state = ckpt.load_state(path, algo.state)
    algo.state = algo.dp.put_replicated(algo.state._replace(
        **{field: getattr(state, field) for field in COMPONENT_FIELDS[name]}))


def from_checkpoint(path: str, config: AlgorithmConfig | None = None) -> Any:
    """Rebuilds any registered algorithm from a checkpoint (its saved config unless one is
    given: needed when the run used custom connector pieces, which are code); a checkpoint
    of several seeds gives `SeedRuns` of them all."""
    if config is None:
        config = saved_config(path)
    seeds = ckpt.load_meta(path).get("seeds")
    if seeds is not None and config.seeds != seeds:
        # several seeds in one state (checkpoints before `seeds` was an option saved the
        # config of the first seed): the config of all of them
        config = config.debugging(seeds=seeds)
    algo = config.build()
    algo.restore(path)
    return algo


def _stream_settings(data: OfflineData) -> dict:
    return {"batch_size": data.dp.local_batch_size, "chunk_size": data.chunk_size,
            "shuffle_buffer_size": data.config.shuffle_buffer_size}


def _stream_checkpoint(data: OfflineData) -> tuple[dict | None, dict]:
    """The stream cursors of every process: readable numbers for meta.json and their replay
    connector states as `stream.msgpack` (one entry a process, in process order: each
    process streams its own share of the files)."""
    from flax import serialization  # start-up cost: only when a checkpoint holds a stream

    cursor = data.cursor
    if cursor is None:
        return None, {}
    mine = serialization.msgpack_serialize({"summary": cursor.summary(),
                                            "replay": cursor.replay_bytes()})
    everyone = [serialization.msgpack_restore(b) for b in distributed.allgather_bytes(mine)]
    meta = {**_stream_settings(data), "processes": [e["summary"] for e in everyone]}
    replay = serialization.msgpack_serialize([e["replay"] for e in everyone])
    return meta, {STREAM_FILE: replay}


def _restored_cursor(path: str, meta: dict, data: OfflineData,
                     connector_state: Any) -> StreamCursor | None:
    """This process's stream cursor from a checkpoint (see `_stream_checkpoint`); None when
    it holds none or the data is not streamed."""
    from flax import serialization  # start-up cost: only when a checkpoint holds a stream

    saved = meta.get("stream")
    if saved is None or not data.config.streams_data:
        return None
    processes = saved["processes"]
    if len(processes) != jax.process_count():
        raise ckpt.CheckpointError(
            f"checkpoint {path!r} streamed its data on {len(processes)} process(es); resume "
            f"it on as many (each streams its own share of the files), not "
            f"{jax.process_count()}")
    now = _stream_settings(data)
    changed = {k: (saved.get(k), v) for k, v in now.items() if saved.get(k) != v}
    if changed:
        raise ckpt.CheckpointError(
            f"checkpoint {path!r} streamed its data with other settings (saved, now): "
            f"{changed}; the resumed stream would not be the one that was saved")
    raw = ckpt.load_file(path, STREAM_FILE)
    if raw is None:
        raise ckpt.CheckpointError(f"checkpoint {path!r} is incomplete: its meta names a "
                                   f"stream cursor but {STREAM_FILE} is missing")
    try:
        replay = serialization.msgpack_restore(raw)[jax.process_index()]
        return StreamCursor.restored(processes[jax.process_index()], replay, connector_state)
    except Exception as e:  # noqa: BLE001 - flax/msgpack raise many types for a mismatch
        raise ckpt.CheckpointError(f"checkpoint {path!r}: {STREAM_FILE} does not match "
                                   f"this config: {type(e).__name__}: {e}") from None
