"""One process of the 2-process tests in test_multihost.py (run as a script).

    python multihost_worker.py ADDRESS NUM_PROCESSES PROCESS_ID

Joins the run, then, for MARWIL (BC's loss plus a value head and a moving average reduced
across devices: the wider of the two) and both sample units, puts this process's rows of a
61-row data set on the global mesh (process 0 holds 25 rows, process 1 the other 36: the
blocks differ in size), runs 4 scanned updates over every process's devices, and compares
with one local device running the same updates on all 61 rows in order; then streams 3 global
batches, each process's half already on a local device, through the prefetch thread. Prints
one JSON line.
"""

import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
sys.path.insert(0, os.path.dirname(__file__))

from rljax_offline.runtime import distributed  # noqa: E402

address, num, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
distributed.initialize(address, num, pid, initialization_timeout_s=60, heartbeat_timeout_s=10)

import jax  # noqa: E402
import numpy as np  # noqa: E402
from learner_testlib import case_named, max_diff, random_columns, spec_for, to_float64  # noqa: E402

from rljax_offline.learning.data_parallel import (  # noqa: E402
    DataParallel,
    prefetch_to_device,
    select_devices,
)
from rljax_offline.learning.init import init_state  # noqa: E402

N, SPLIT, LENGTHS = 61, 25, ([10, 15], [20, 1, 15])


def run(case):
    _, config, spaces = case
    spec = spec_for(config, spaces)
    data = to_float64(random_columns(spec.data.columns, *spaces, N, seed=4))
    learning = spec.learning
    mine = slice(0, SPLIT) if pid == 0 else slice(SPLIT, N)
    local = jax.tree_util.tree_map(lambda x: x[mine], data)
    out = {}
    for unit in ("timesteps", "episodes"):
        dp = DataParallel(learning, select_devices(), 16)
        state = dp.put_replicated(to_float64(init_state(learning, 7)))
        state, metrics = dp.scan_on_device(4, unit)(state, dp.put_data(local, LENGTHS[pid]))
        got = jax.device_get(state.params)
        one = DataParallel(learning, jax.local_devices()[:1], 16, mode="jit")
        ref_state = one.put_replicated(to_float64(init_state(learning, 7)))
        ref_data = one.put_data(data, LENGTHS[0] + LENGTHS[1])
        ref = jax.device_get(one.scan_on_device(4, unit)(ref_state, ref_data)[0].params)
        leaves = jax.tree_util.tree_leaves(got)
        out[unit] = {"diff_vs_one_device": max_diff(got, ref),
                     "param_checksum": float(sum(np.sum(np.asarray(x)) for x in leaves)),
                     "devices": len(dp.devices), "step": int(jax.device_get(state.step))}
    # Streamed: this process's 8 rows of each 16-row global batch, already on a local
    # device, through the prefetch thread; equals one device stepping the global batches.
    dp = DataParallel(learning, select_devices(), 16)
    batches = [jax.tree_util.tree_map(lambda x, i=i: x[i * 16:(i + 1) * 16], data)
               for i in range(3)]
    mine = [jax.device_put(jax.tree_util.tree_map(lambda x: x[pid * 8:(pid + 1) * 8], b),
                           jax.local_devices()[0]) for b in batches]
    state = dp.put_replicated(to_float64(init_state(learning, 7)))
    state, _ = dp.stream_updates(state, prefetch_to_device(iter(mine), dp.put_sharded), 3)
    one = DataParallel(learning, jax.local_devices()[:1], 16, mode="jit")
    ref = one.put_replicated(to_float64(init_state(learning, 7)))
    for b in batches:
        ref, _ = one.step(ref, b)
    got = jax.device_get(state.params)
    out["streamed"] = {"diff_vs_one_device": max_diff(got, jax.device_get(ref.params)),
                       "param_checksum": float(sum(np.sum(np.asarray(x))
                                                   for x in jax.tree_util.tree_leaves(got))),
                       "devices": len(dp.devices), "step": int(jax.device_get(state.step))}
    return out


with jax.enable_x64(True):
    result = {"marwil-discrete": run(case_named("marwil-discrete"))}
print(json.dumps({"process": jax.process_index(), "count": jax.process_count(),
                  "result": result}), flush=True)
