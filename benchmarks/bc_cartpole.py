"""Benchmark: from the Parquet files of a 500-episode CartPole expert recording to an
evaluation return >= 450, for a cold process with an empty compilation cache and again with
the cache warm, each timed in parts: import, build (`config.build()`), read (the files to
learner columns on the devices), compile (every XLA compile or persistent-cache load on
the main thread, by phase; those on background threads, which overlap the phases, apart),
train (the updates, main-thread compile excluded), evaluate (the env episodes, main-thread
compile excluded). RLlib 2.60 took 85.7 s (median) for the same on this machine kind in an
earlier session: printed labelled as quoted (not run by this command), in no ratio.

Targets (issue 13): cold <= 2.5 s, warm <= 1.7 s, build <= 0.3 s, first train() <= 0.8 s.
The settings (lr 1e-3, batch 1024, 100 updates an iteration, 5 evaluation episodes) are the
ones issue 13 was measured with; the run stops at the first evaluation >= 450, printed. Two of the
four programs compile on background threads (the init program while the data is read, the
acting step while the first updates run): the gain needs a free core, so compare runs at a
1-minute load well below the core count.

The reference, run in the same command: `_bare_bc_cartpole.py`, the same job hand-written on
jax + optax + pyarrow + msgpack with nothing of ours (cold with an empty JAX cache, then warm).
Ours over it is the library's own start-up cost. Rounds of (ours cold, ours warm, bare cold,
bare warm) are interleaved; medians are printed, with the median round in full.

    python benchmarks/bc_cartpole.py [--updates-per-iteration 100] [--rounds 3]
"""

import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402

# Quoted, not measured by this command: RLlib 2.60's median for the same job, measured in an
# earlier session on this machine kind (ray is not installed here). In no ratio.
RLLIB_QUOTED = {"seconds": 85.7, "source": "RLlib 2.60, an earlier session on this machine "
                "kind; quoted, not measured by this command"}
TARGETS = {"cold_total_s": 2.5, "warm_total_s": 1.7, "build_s": 0.3, "first_train_s": 0.8}
# XLA's compile, or loading its result from the persistent cache: never nested, so they add
# up. Tracing and lowering to MLIR (nested for inner jits, so not summed) are reported apart.
_COMPILE_EVENTS = ("/jax/core/compile/backend_compile_duration",
                   "/jax/compilation_cache/cache_retrieval_time_sec")
_TRACE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                 "/jax/core/compile/jaxpr_to_mlir_module_duration")


def child(args) -> dict:
    """One timed run in this (fresh) process."""
    import jax

    compile_s: dict[str, float] = {}
    phase = ["import"]

    trace_s = [0.0]

    def on_event(event, duration, **kwargs):
        if event in _COMPILE_EVENTS:  # a background thread's compile overlaps the phases
            where = (phase[0] if threading.current_thread() is threading.main_thread()
                     else "background")
            compile_s[where] = compile_s.get(where, 0.0) + duration
        elif event in _TRACE_EVENTS:
            trace_s[0] += duration

    jax.monitoring.register_event_duration_secs_listener(on_event)
    from rljax_offline import BCConfig

    t_import = time.perf_counter() - T_START
    phase[0] = "build"
    t0 = time.perf_counter()
    algo = (BCConfig().environment("CartPole-v1").offline_data(input_=args.data)
            .training(lr=1e-3, train_batch_size_per_learner=1024,
                      num_updates_per_iteration=args.updates_per_iteration)
            .evaluation(evaluation_interval=0)
            .build())
    t_build = time.perf_counter() - t0
    phase[0] = "read"
    t0 = time.perf_counter()
    algo.load_data()
    t_read = time.perf_counter() - t0
    ret, train_s, eval_s, first_train = 0.0, 0.0, 0.0, None
    for _ in range(args.max_iterations):
        phase[0] = "train"
        t0 = time.perf_counter()
        algo.train()
        dt = time.perf_counter() - t0
        first_train = dt if first_train is None else first_train
        train_s += dt
        phase[0] = "evaluate"
        t0 = time.perf_counter()
        ret = algo.evaluate(args.eval_episodes)["episode_return_mean"]
        eval_s += time.perf_counter() - t0
        if ret >= 450:
            break
    total = time.perf_counter() - T_START
    c = {k: round(v, 3) for k, v in compile_s.items()}
    return {
        "cache": algo.compilation_cache_dir, "device": jax.devices()[0].platform,
        "num_devices": len(algo.devices), "episodes": algo.num_episodes,
        "timesteps": algo.num_timesteps, "import_s": round(t_import, 3),
        "build_s": round(t_build, 3), "read_s": round(t_read, 3),
        "compile_s": round(sum(v for k, v in compile_s.items() if k != "background"), 3),
        "compile_by_phase_s": c,
        "trace_and_lower_s (nested, inside the phases)": round(trace_s[0], 3),
        "train_s": round(train_s - compile_s.get("train", 0.0), 3),
        "evaluate_s": round(eval_s - compile_s.get("evaluate", 0.0), 3),
        "first_train_s": round(first_train, 3), "total_s": round(total, 3),
        # user + system CPU seconds of this process: less swayed by others' load than wall time
        "process_cpu_s": round(sum(os.times()[:2]), 3),
        "iterations": algo.iteration, "updates": algo.iteration * args.updates_per_iteration,
        "final_return": ret, "reached_450": ret >= 450}


def _run(cmd: list, env: dict) -> dict:
    """One fresh process; its JSON line, plus its wall time seen from outside."""
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr[-3000:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["process_wall_s"] = round(time.perf_counter() - t0, 3)
    return out


def _median(values: list) -> float:
    return round(statistics.median(values), 3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--updates-per-iteration", type=int, default=100)
    ap.add_argument("--eval-episodes", type=int, default=5)
    ap.add_argument("--max-iterations", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of (ours cold, ours warm, bare cold, bare warm); medians")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--data", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)), flush=True)
        return
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    from _common import cartpole_recording

    data = cartpole_recording(500, output_max_rows_per_file=100)
    load_before = round(os.getloadavg()[0], 2)
    ours_cmd = [sys.executable, __file__, "--child", "--data", data,
                "--updates-per-iteration", str(args.updates_per_iteration),
                "--eval-episodes", str(args.eval_episodes),
                "--max-iterations", str(args.max_iterations)]
    runs: dict[str, list] = {"cold": [], "warm": [], "bare_cold": [], "bare_warm": []}
    for _ in range(args.rounds):  # interleaved, so a busy spell on the machine hits both
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "RLJAX_OFFLINE_COMPILATION_CACHE": cache}
            for run in ("cold", "warm"):  # cold: a fresh process, the cache empty; warm: filled
                runs[run].append(_run(ours_cmd, env))
        with tempfile.TemporaryDirectory() as cache:
            bare = [sys.executable, os.path.join(here, "_bare_bc_cartpole.py"), cache, data]
            for run in ("bare_cold", "bare_warm"):
                runs[run].append(_run(bare, dict(os.environ)))
    out = {"rounds": args.rounds}
    # the round whose total is the median, in full (its parts add up, unlike medians of parts)
    for run, rs in runs.items():
        out[run] = sorted(rs, key=lambda r: r["total_s"])[(len(rs) - 1) // 2]
        out[run]["total_s_every_round"] = [r["total_s"] for r in rs]
    med = {run: _median([r["total_s"] for r in rs]) for run, rs in runs.items()}
    measured = {"cold_total_s": med["cold"], "warm_total_s": med["warm"],
                "build_s": _median([r["build_s"] for r in runs["warm"]]),
                "first_train_s": _median([r["first_train_s"] for r in runs["warm"]])}
    out["targets (medians; build and first train: warm)"] = {
        k: f"{v} s (target <= {TARGETS[k]} s): " + ("met" if v <= TARGETS[k] else "missed")
        for k, v in measured.items()}
    # The same job hand-written on jax + optax + pyarrow + msgpack in one short script: what
    # is left of our start-up beyond it is the library's own cost.
    out["ours / bare hand-written script (median totals)"] = {
        "cold": f"{med['cold']} / {med['bare_cold']} s = {med['cold'] / med['bare_cold']:.2f}x",
        "warm": f"{med['warm']} / {med['bare_warm']} s = {med['warm'] / med['bare_warm']:.2f}x"}
    # Others' work on a shared machine slows every phase: the 1-minute load average says how
    # quiet it was (the figures are only comparable at a load well below the core count).
    out["load_average_1min"] = {"before": load_before, "after": round(os.getloadavg()[0], 2),
                                "cpu_count": os.cpu_count()}
    out["rllib_quoted"] = RLLIB_QUOTED
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
