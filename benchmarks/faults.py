"""Benchmark: the fault-injection harness of tests/test_faults_*.py at full size, as a table.

Per class of fault: inputs tried, named errors (an `RljaxError`), inputs read back equal to
the undamaged data, silently different results on files with checksums (must be 0), on files
without checksums (RLlib's Parquet, JSON: a flipped digit is just another number there), raw
exceptions (must be 0) and the peak extra memory of one read against the bound
64 MB + 100 x input bytes. Every read runs in a forked child, so a blow-up cannot hide.

    python benchmarks/faults.py [--per-format 100] [--seed 0] [--markdown]
"""

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import fault_testlib as lib  # noqa: E402


def mutations(folder: str, per_format: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for name, (path, read, checksummed) in lib.format_cases(folder).items():
        good = open(path, "rb").read()
        baseline = lib.fingerprint(read(path))
        row = {"class": f"mutated: {name}", "tried": 0, "named": 0, "same": 0, "silent": 0,
               "silent_unchecked": 0, "raw": 0, "peak": 0, "within": True}
        for i in range(per_format):
            bad = os.path.join(folder, f"m{i}_" + os.path.basename(path))
            with open(bad, "wb") as f:
                f.write(lib.mutate(good, rng))
            outcome, peak = lib.peak_memory(read, bad, baseline)
            size = os.path.getsize(bad)
            os.remove(bad)
            row["tried"] += 1
            if outcome == "silent" and not checksummed:
                outcome = "silent_unchecked"
            row[outcome if outcome in row else "raw"] += 1
            row["peak"] = max(row["peak"], peak)
            row["within"] &= 0 <= peak <= lib.memory_bound(size)
        rows.append(row)
    return rows


def crafted(folder: str) -> list[dict]:
    by_class: dict[str, dict] = {}
    for cls, _, path, read in lib.crafted_cases(folder):
        outcome, peak = lib.peak_memory(read, path)
        row = by_class.setdefault(cls, {"class": f"crafted: {cls}", "tried": 0, "named": 0,
                                        "same": 0, "silent": 0, "silent_unchecked": 0,
                                        "raw": 0, "peak": 0, "within": True})
        row["tried"] += 1
        row[outcome if outcome in ("named", "raw") else "silent"] += 1  # success = a defect
        row["peak"] = max(row["peak"], peak)
        row["within"] &= 0 <= peak <= lib.memory_bound(os.path.getsize(path))
    assert not os.path.exists(os.path.join(folder, "CODE_RAN")), "a payload ran code"
    return list(by_class.values())


def checkpoint_crashes(folder: str) -> dict:
    from rljax_offline.learning import checkpoint as ckpt

    row = {"class": "checkpoint: kill at each fs step", "tried": 0, "named": 0, "same": 0,
           "silent": 0, "silent_unchecked": 0, "raw": 0, "peak": 0, "within": True}
    for path, _, _ in lib.crash_checkpoint_saves(folder):
        row["tried"] += 1
        try:
            it = ckpt.load_meta(path)["iteration"]
            state = ckpt.load_state(path, lib.checkpoint_state(0))
            ok = np.array_equal(state["w"], lib.checkpoint_state(it)["w"])
            row["same" if ok else "silent"] += 1
        except Exception:  # noqa: BLE001 - no complete checkpoint left: a defect
            row["raw"] += 1
    return row


def checkpoint_flips(folder: str, n: int, seed: int) -> dict:
    from rljax_offline.errors import CheckpointError
    from rljax_offline.learning import checkpoint as ckpt

    rng = np.random.default_rng(seed)
    path = os.path.join(folder, "flip")
    ckpt.save_checkpoint(path, lib.checkpoint_state(1), {"iteration": 1})
    gen = os.path.join(path, sorted(os.listdir(path))[-1])
    row = {"class": "checkpoint: mutated files", "tried": 0, "named": 0, "same": 0,
           "silent": 0, "silent_unchecked": 0, "raw": 0, "peak": 0, "within": True}
    for i in range(n):
        name = [ckpt.STATE_FILE, ckpt.META_FILE, ckpt.MANIFEST_FILE][i % 3]
        file = os.path.join(gen, name)
        good = open(file, "rb").read()
        open(file, "wb").write(lib.mutate(good, rng))
        row["tried"] += 1
        try:
            meta = ckpt.load_meta(path)
            state = ckpt.load_state(path, lib.checkpoint_state(0))
            same = meta == {"iteration": 1} and np.array_equal(
                state["w"], lib.checkpoint_state(1)["w"])
            row["same" if same else "silent"] += 1
        except CheckpointError:
            row["named"] += 1
        except Exception:  # noqa: BLE001
            row["raw"] += 1
        open(file, "wb").write(good)
    return row


def cli_arguments() -> dict:
    import contextlib
    import io

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from test_faults_cli import BAD_ARGS

    from rljax_offline.cli import main

    row = {"class": "CLI: bad arguments", "tried": 0, "named": 0, "same": 0, "silent": 0,
           "silent_unchecked": 0, "raw": 0, "peak": 0, "within": True}
    for argv in BAD_ARGS:
        err = io.StringIO()
        row["tried"] += 1
        try:
            with contextlib.redirect_stderr(err):
                main(argv)
            row["silent"] += 1
        except SystemExit as e:
            one_line = err.getvalue().startswith("error: ") and err.getvalue().count("\n") == 1
            row["named" if e.code == 2 and one_line else "raw"] += 1
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-format", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        rows = mutations(folder, args.per_format, args.seed)
        rows += crafted(folder)
        rows.append(checkpoint_crashes(folder))
        rows.append(checkpoint_flips(folder, 60, args.seed))
    rows.append(cli_arguments())
    head = ["class", "tried", "named", "same", "silent", "silent_unchecked", "raw", "peak MB",
            "within bound"]
    table = [[r["class"], r["tried"], r["named"], r["same"], r["silent"], r["silent_unchecked"],
              r["raw"], f"{r['peak'] / 2**20:.1f}", "yes" if r["within"] else "NO"]
             for r in rows]
    total = [sum(r[i] for r in table) for i in range(1, 7)]
    table.append(["total", *total, "", "yes" if all(r["within"] for r in rows) else "NO"])
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in table:
            print("| " + " | ".join(str(x) for x in r) + " |")
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(head, *table)]
        for r in [head, *table]:
            print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
    print(f"\n{time.perf_counter() - t0:.0f} s; silent (checksummed files) and raw must be 0")


if __name__ == "__main__":
    main()
