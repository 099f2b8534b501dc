"""Multi-host runs on JAX's own runtime (`jax.distributed`, one controller a process).

Every process runs the same program; `initialize` joins them before JAX touches a device.
Afterwards `jax.devices()` lists every process's devices, the learner's `("data",)` mesh spans
them all, each process reads its own share of the input files, and global batches are built
with `jax.make_array_from_process_local_data` (see `learning.data_parallel.DataParallel`). Process 0
alone writes checkpoints, metrics and plots (`is_writer`).

The settings come from arguments (the CLI's `--coordinator-address --num-processes
--process-id`, the config's `learners(...)` group) or, left out, from what
`jax.distributed.initialize` reads itself: `JAX_COORDINATOR_ADDRESS` and the cluster
environments it detects (SLURM, Open MPI, Kubernetes, ...).

A peer that dies is noticed by the coordination service within `heartbeat_timeout_s`; the
others then end with an error instead of waiting in a collective forever.
"""

from __future__ import annotations

import os
import re
import socket
import time

import jax

from rljax_offline.errors import DistributedError

_ADDRESS = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


def _check(coordinator_address, num_processes, process_id) -> None:
    if coordinator_address is not None:
        m = _ADDRESS.match(str(coordinator_address))
        if m is None or not 0 < int(m.group(2)) < 65536:
            raise DistributedError(f"coordinator_address must be HOST:PORT, got "
                                   f"{coordinator_address!r}")
    if num_processes is not None and (not isinstance(num_processes, int)
                                      or isinstance(num_processes, bool) or num_processes < 1):
        raise DistributedError(f"num_processes must be a positive int, got {num_processes!r}")
    if process_id is not None:
        if not isinstance(process_id, int) or isinstance(process_id, bool):
            raise DistributedError(f"process_id must be an int, got {process_id!r}")
        if num_processes is not None and not 0 <= process_id < num_processes:
            raise DistributedError(f"process_id {process_id} is out of range for "
                                   f"num_processes={num_processes} (0 to {num_processes - 1})")


def _split(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host.strip("[]"), int(port)


def _wait_for_coordinator(address: str, timeout_s: float, who: str) -> None:
    """Waits until process 0's coordinator accepts connections. XLA's own client aborts the
    process with a stack trace when it cannot register; this turns that into a named error."""
    host, port = _split(address)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError as e:
            if time.monotonic() >= deadline:
                raise DistributedError(
                    f"could not reach the coordinator at {address} within {timeout_s:g} s "
                    f"({who}): {e.strerror or e}; is process 0 running with the same "
                    "--coordinator-address, and is the port open?") from None
            time.sleep(0.2)


def _check_port_free(address: str, who: str) -> None:
    """Process 0 serves the coordinator: a port already taken is a named error."""
    _, port = _split(address)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))
        except OSError as e:
            raise DistributedError(f"process 0 cannot serve the coordinator on port {port} "
                                   f"({who}): {e.strerror or e}; pick a free port") from None


def is_initialized() -> bool:
    """Whether this process already joined a `jax.distributed` run."""
    from jax._src import distributed as _dist

    return _dist.global_state.client is not None


def requested(coordinator_address=None, num_processes=None, process_id=None) -> bool:
    """Whether these settings (or `JAX_COORDINATOR_ADDRESS`) ask for a multi-process run.

    Args:
      coordinator_address: process 0's `HOST:PORT`, or None.
      num_processes: how many processes take part, or None.
      process_id: this process's index, or None.
    """
    if num_processes == 1:
        return False
    return any(v is not None for v in (coordinator_address, num_processes, process_id)) or (
        bool(os.environ.get("JAX_COORDINATOR_ADDRESS")))


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *, initialization_timeout_s: int = 60,
               heartbeat_timeout_s: int = 10) -> bool:
    """Joins the multi-process run these settings describe; returns whether it is one.

    Does nothing (False) when nothing asks for one, and nothing more when this process has
    joined already. Bad settings, a coordinator that cannot be reached within
    `initialization_timeout_s`, or JAX already running on its devices are one-line
    `DistributedError`s.

    Args:
      coordinator_address: process 0's `HOST:PORT`; None: what `jax.distributed.initialize`
        reads (`JAX_COORDINATOR_ADDRESS`, SLURM, Open MPI, Kubernetes).
      num_processes: how many processes take part (None: from the environment).
      process_id: this process's index (None: from the environment).
      initialization_timeout_s: seconds to wait for the coordinator.
      heartbeat_timeout_s: seconds after which a silent process ends the others.

    Raises:
      DistributedError: bad settings, an unreachable coordinator, or JAX already running.
    """
    if is_initialized():
        return True
    if not requested(coordinator_address, num_processes, process_id):
        return False
    _check(coordinator_address, num_processes, process_id)
    address = coordinator_address or os.environ.get("JAX_COORDINATOR_ADDRESS")
    who = f"process {process_id} of {num_processes}"
    if address is not None and process_id is not None:
        if process_id == 0:
            _check_port_free(address, who)
        else:
            _wait_for_coordinator(address, initialization_timeout_s, who)
    try:
        jax.distributed.initialize(coordinator_address=coordinator_address,
                                   num_processes=num_processes, process_id=process_id,
                                   initialization_timeout=int(initialization_timeout_s),
                                   heartbeat_timeout_seconds=int(heartbeat_timeout_s))
    except DistributedError:
        raise
    except Exception as e:  # XLA's runtime errors carry pages of detail: keep the gist
        text = " ".join(str(e).split())
        if "before any JAX" in text or "must be called before" in text:
            raise DistributedError(f"jax.distributed must join before JAX uses its devices "
                                   f"({who}): build the config first thing in the "
                                   "program") from None
        if "DEADLINE_EXCEEDED" in text or "UNAVAILABLE" in text or "connect" in text.lower():
            raise DistributedError(
                f"could not reach the coordinator at {address} within "
                f"{initialization_timeout_s} s ({who}); is process 0 running and the "
                "address reachable?") from None
        raise DistributedError(f"jax.distributed.initialize failed ({who}, coordinator "
                               f"{address}): {text[:300]}") from None
    return True


def initialize_from_config(config) -> bool:
    """`initialize` with a config's `learners(...)` settings.

    Args:
      config: an `AlgorithmConfig` (its `coordinator_address`, `num_processes`,
        `process_id` and `distributed_*_timeout_s` options are read).
    """
    return initialize(config.coordinator_address, config.num_processes, config.process_id,
                      initialization_timeout_s=config.distributed_initialization_timeout_s,
                      heartbeat_timeout_s=config.distributed_heartbeat_timeout_s)


def is_writer() -> bool:
    """Process 0 writes checkpoints, metrics and plots; the others only compute."""
    return jax.process_index() == 0


def barrier(name: str) -> None:
    """Waits until every process reaches the barrier `name`; a collective. One process: no-op.
    Used after process 0 writes what the others read next (a checkpoint), so no process reads
    a folder that is still being written.

    Args:
      name: the barrier's name; every process passes the same.
    """
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices(name)


def share_of_files(files: list, what: str) -> None:
    """A named error when there are fewer input files than processes (each reads its own
    share of the files, so some would have none).

    Args:
      files: the input files.
      what: what reads them, for the message.

    Raises:
      DistributedError: fewer files than processes.
    """
    count = jax.process_count()
    if len(files) < count:
        raise DistributedError(
            f"{what} has {len(files)} input file(s) for {count} processes; each process "
            f"reads its own share of the files: write the data in at least {count} files "
            "(output_max_rows_per_file) or run fewer processes")


def allgather_bytes(data: bytes) -> list[bytes]:
    """Every process's `data` (lengths may differ), in process order; a collective: every
    process calls it. One process: `[data]`.

    Args:
      data: this process's bytes.
    """
    if jax.process_count() == 1:
        return [data]
    import numpy as np
    from jax.experimental import multihost_utils

    sizes = multihost_utils.process_allgather(np.asarray([len(data)], np.int64))
    padded = np.zeros(max(int(sizes.max()), 1), np.uint8)
    padded[:len(data)] = np.frombuffer(data, np.uint8)
    gathered = np.asarray(multihost_utils.process_allgather(padded))
    return [gathered[p, :int(sizes[p, 0])].tobytes() for p in range(len(sizes))]
