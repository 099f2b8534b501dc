"""Start-up footprint (issue 13, fast start): what a BC run imports and how many XLA programs
it compiles. Each check runs in a fresh interpreter, so no earlier test's imports or jit
caches hide anything; the persistent compilation cache is off there."""

import json
import os
import subprocess
import sys

import pytest
from conftest import FIXTURES, REPO

# Never needed to train or evaluate: plotting, progress bars, logging back ends, datasets,
# dataframes and test-only helpers (chex is a [dev] dependency only).
NOT_FOR_TRAINING = ("matplotlib", "tqdm", "tensorboardX", "chex", "pyarrow.dataset", "pandas",
                    "minari", "wandb", "mlflow")

_RUN = """
import json, sys, threading
import jax

compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, duration, **kw: compiles.append(
        phase[0] if threading.current_thread() is threading.main_thread() else "background")
    if event == "/jax/core/compile/backend_compile_duration" else None)
phase = ["import"]
import rljax_offline
after_import = sorted(m for m in {names} if m in sys.modules)
from rljax_offline import BCConfig
phase[0] = "build"
algo = (BCConfig().environment("CartPole-v1").offline_data(input_={data!r})
        .training(train_batch_size_per_learner=64, num_updates_per_iteration=2)
        .evaluation(evaluation_interval=0, evaluation_num_envs=2).build())
phase[0] = "read"
algo.load_data()
phase[0] = "train"
algo.train()
phase[0] = "evaluate"
algo.evaluate(2)
threads = sorted(t.name for t in threading.enumerate() if t.name.startswith("rljax_offline"))
print(json.dumps({{"after_import": after_import, "threads_left": threads,
                  "after_run": sorted(m for m in {names} if m in sys.modules),
                  "compiles": {{p: compiles.count(p) for p in set(compiles)}}}}))
"""


@pytest.fixture(scope="module")
def bc_run():
    code = _RUN.format(names=NOT_FOR_TRAINING, data=str(FIXTURES / "episodes"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "RLJAX_OFFLINE_COMPILATION_CACHE": "0",
           "XLA_FLAGS": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_training_and_evaluating_import_no_plotting_logging_or_dataset_modules(bc_run):
    assert bc_run["after_import"] == []
    assert bc_run["after_run"] == []


def test_one_program_each_for_init_learner_pipeline_updates_and_acting(bc_run):
    # No eager op compiles a small program of its own along the way. On the main thread:
    # reading compiles the learner pipeline, train() the updates' scan. In the background:
    # the init program (build() traces it and returns; it compiles while the data is read)
    # and the evaluation's jitted acting step (compiled while the first updates run, so
    # evaluate() finds it ready and compiles nothing).
    assert bc_run["compiles"] == {"read": 1, "train": 1, "background": 2}


def test_no_background_thread_outlives_the_start_up(bc_run):
    assert bc_run["threads_left"] == []


def test_the_init_programs_cpu_options_change_no_value_and_are_dropped_where_unknown(
        monkeypatch):
    import jax
    import numpy as np

    from rljax_offline import BCConfig
    from rljax_offline.learning import init

    learning = (BCConfig().environment("CartPole-v1").offline_data(input_="unused")
                .learners(num_devices=1, compilation_cache_dir=None).build().spec.learning)
    states = [init.init_state(learning, 7)]
    for cpu_options in ({}, {"xla_no_such_option_h15": False}):  # none; one XLA lacks
        monkeypatch.setattr(init, "_INIT_CPU_COMPILER_OPTIONS", cpu_options)
        states.append(init.init_state(learning, 7))
    leaves = [jax.tree_util.tree_leaves(jax.device_get(s)) for s in states]
    for other in leaves[1:]:
        assert all(np.array_equal(a, b) for a, b in zip(leaves[0], other))
