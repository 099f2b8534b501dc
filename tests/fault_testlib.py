"""Shared helpers of the fault-injection tests: small real data files of every format, the
subprocess environment that imports this worktree, seeded byte mutations."""

import json
import os
import sys
from textwrap import dedent as _dedent

import numpy as np

from rljax_offline import Episode

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "rllib_cartpole")


def subprocess_env() -> dict:
    """Environment for a child Python that imports this checkout, on CPU, quietly."""
    path = REPO + os.pathsep + os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": path, "JAX_PLATFORMS": "cpu",
            "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1"}


PYTHON = sys.executable


def cartpole_episodes(n: int, seed: int = 0, length: int = 30) -> list[Episode]:
    """`n` CartPole-shaped episodes with random observations and valid actions."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        T = int(rng.integers(length // 2, length + 1))
        out.append(Episode(
            observations=rng.normal(size=(T + 1, 4)).astype(np.float32),
            actions=rng.integers(0, 2, T).astype(np.int64),
            rewards=np.ones(T), terminated=True, id_=f"ep{seed}-{i}"))
    return out


def mutate(data: bytes, rng: np.random.Generator) -> bytes:
    """One seeded random mutation: flipped bits, a random run of bytes, or a truncation."""
    kind = int(rng.integers(3))
    buf = bytearray(data)
    if kind == 0:
        for _ in range(int(rng.integers(1, 4))):
            pos = int(rng.integers(len(buf)))
            buf[pos] ^= 1 << int(rng.integers(8))
    elif kind == 1:
        pos = int(rng.integers(len(buf)))
        n = int(rng.integers(1, 16))
        buf[pos:pos + n] = rng.integers(0, 256, min(n, len(buf) - pos)).astype(np.uint8).tobytes()
    else:
        del buf[int(rng.integers(len(buf))):]
    return bytes(buf)


def sample_batch_line(T: int = 5, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(T + 1, 4)).round(3)
    return json.dumps({"type": "SampleBatch", "obs": obs[:-1].tolist(),
                       "new_obs": obs[1:].tolist(), "actions": rng.integers(0, 2, T).tolist(),
                       "rewards": [1.0] * T, "dones": [False] * (T - 1) + [True],
                       "eps_id": [seed] * T})


# ---------------------------------------------------------------------- fault harness
#
# Shared by tests/test_faults_data.py (few cases) and benchmarks/faults.py (many): every input
# is read and its outcome classified as "same" (read back equal to the undamaged data),
# "named" (an RljaxError), "silent" (read back different without an error: a defect for
# files with checksums) or "raw" (any other exception: always a defect).


def fingerprint(episodes) -> list:
    """What a reader returned, in a comparable form (ids, lengths, values, flags)."""
    out = []
    for ep in episodes:
        import jax

        leaves = jax.tree_util.tree_leaves((ep.observations, ep.actions, ep.rewards,
                                            ep.extra_model_outputs))
        out.append((ep.id_, len(ep), ep.is_terminated, ep.is_truncated,
                    tuple(np.asarray(x).tobytes() for x in leaves)))
    return out


def classify(read, path, baseline) -> tuple[str, str]:
    """(outcome, detail) of `read(path)` against the fingerprint of the undamaged input."""
    from rljax_offline.errors import RljaxError

    try:
        got = fingerprint(read(path))
    except RljaxError as e:
        return "named", str(e)[:200]
    except Exception as e:  # noqa: BLE001 - what the harness exists to find
        return "raw", f"{type(e).__name__}: {str(e)[:200]}"
    return ("same", "") if got == baseline else ("silent", f"{len(got)} episodes")


def format_cases(folder: str) -> dict:
    """{format name: (file path, reader, checksummed)}: a real file of every input format,
    written by our writer or RLlib, with the reader for it."""
    import glob
    import shutil

    from rljax_offline.data import read_episodes, read_sample_batch_json, write_episodes

    eps = cartpole_episodes(6, seed=7)
    cases = {}

    def ours(name, **options):
        (f,) = write_episodes(eps, os.path.join(folder, name), **options)
        return f

    def episodes(p):
        return read_episodes(p)

    def tabular(p):
        return read_episodes(p, input_read_episodes=False)

    cases["episodes (ours)"] = (ours("e"), episodes, True)
    cases["episodes rllib layout (ours)"] = (ours("r", rllib_layout=True), episodes, True)
    cases["tabular (ours)"] = (ours("t", output_write_episodes=False), tabular, True)
    cases["tabular lz4 columns (ours)"] = (
        ours("z", output_write_episodes=False, output_compress_columns=["obs", "new_obs"]),
        tabular, True)
    for kind, reader in (("episodes", episodes), ("tabular", tabular),
                         ("tabular_uncompressed", tabular)):
        src = sorted(glob.glob(os.path.join(FIXTURES, kind, "**", "*.parquet"),
                               recursive=True))[0]
        dst = os.path.join(folder, f"rllib_{kind}.parquet")
        shutil.copy(src, dst)
        cases[f"{kind} (RLlib)"] = (dst, reader, False)
    json_path = os.path.join(folder, "batches.json")
    with open(json_path, "w") as f:
        f.write("\n".join(sample_batch_line(8, seed=s) for s in range(4)) + "\n")
    cases["SampleBatch JSON"] = (json_path, lambda p: list(read_sample_batch_json(p)), False)
    return cases


def mutation_outcomes(folder: str, per_format: int, seed: int = 0) -> dict:
    """{format: {outcome: count}} over `per_format` seeded mutations of each format's file."""
    rng = np.random.default_rng(seed)
    results = {}
    for name, (path, read, checksummed) in format_cases(folder).items():
        good = open(path, "rb").read()
        baseline = fingerprint(read(path))
        counts = {"same": 0, "named": 0, "silent": 0, "raw": 0, "checksummed": checksummed,
                  "examples": []}
        for i in range(per_format):
            bad_path = os.path.join(folder, f"m{i}_" + os.path.basename(path))
            with open(bad_path, "wb") as f:
                f.write(mutate(good, rng))
            outcome, detail = classify(read, bad_path, baseline)
            counts[outcome] += 1
            if outcome in ("raw", "silent") and len(counts["examples"]) < 3:
                counts["examples"].append(detail)
            os.remove(bad_path)
        results[name] = counts
    return results


def _episode_file(folder: str, name: str, blob: bytes) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = os.path.join(folder, name + ".parquet")
    pq.write_table(pa.table({"item": pa.array([blob], pa.binary())}), path)
    return path


def _tabular_file(folder: str, name: str, columns: dict, metadata: dict | None = None) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(columns)
    if metadata:
        fields = [table.schema.field(c).with_metadata(metadata.get(c))
                  if c in metadata else table.schema.field(c) for c in table.column_names]
        table = table.cast(pa.schema(fields))
    path = os.path.join(folder, name + ".parquet")
    pq.write_table(table, path)
    return path


def _tabular_base(T: int = 3) -> dict:
    return {"eps_id": ["a"] * T, "obs": [[0.1, 0.2, 0.3, 0.4]] * T, "actions": [0] * T,
            "rewards": [1.0] * T, "new_obs": [[0.1, 0.2, 0.3, 0.4]] * T,
            "terminateds": [False] * (T - 1) + [True]}


class _RunsCode:
    """A pickle payload that would create a marker file if anything unpickled it."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def crafted_cases(folder: str) -> list[tuple[str, str, str, object]]:
    """(class, name, path, reader) of hostile inputs, each of which must be a named error
    without running code or allocating memory out of proportion to its size."""
    import base64
    import pickle
    import struct
    import zlib

    import lz4.frame
    import msgpack

    from rljax_offline.data import read_episodes, read_sample_batch_json
    from rljax_offline.data.codec import encode_state

    def episodes(p):
        return read_episodes(p)

    def tabular(p):
        import gymnasium as gym

        env = gym.make("CartPole-v1")
        return read_episodes(p, input_read_episodes=False,
                             observation_space=env.observation_space,
                             action_space=env.action_space)

    def sample_json(p):
        return list(read_sample_batch_json(p))

    marker = os.path.join(folder, "CODE_RAN")
    state = cartpole_episodes(1)[0].get_state()
    out = []

    def ep(cls, name, blob):
        out.append((cls, name, _episode_file(folder, name, blob), episodes))

    def tab(cls, name, columns, metadata=None):
        out.append((cls, name, _tabular_file(folder, name, columns, metadata), tabular))

    def js(cls, name, data: bytes):
        path = os.path.join(folder, name + ".json")
        with open(path, "wb") as f:
            f.write(data)
        out.append((cls, name, path, sample_json))

    # msgpack headers claiming huge lengths
    ep("msgpack", "array32 of 4G items", b"\xdd\xff\xff\xff\xff\x01")
    ep("msgpack", "bin32 of 4 GB", b"\x81\xa1x\xc6\xff\xff\xff\xff" + b"\0" * 8)
    ep("msgpack", "map32 of 4G pairs", b"\xdf\xff\xff\xff\xff")
    ep("msgpack", "nested 100k arrays", b"\x91" * 100_000 + b"\xc0")
    nd = {b"nd": True, b"type": "<f4", b"kind": b"", b"shape": [1 << 20, 1 << 20], b"data": b""}
    ep("msgpack", "ndarray shape 2^40", msgpack.packb({"observations": nd}, use_bin_type=True))
    nd = {b"nd": True, b"type": "<f4", b"kind": b"", b"shape": [[3], "x"], b"data": b"\0" * 12}
    ep("msgpack", "ndarray shape not ints", msgpack.packb({"observations": nd},
                                                          use_bin_type=True))
    nd = {b"nd": True, b"type": "|O", b"kind": b"O", b"shape": [1],
          b"data": pickle.dumps(_RunsCode(marker))}
    ep("pickle", "msgpack-numpy object array (pickle)", msgpack.packb(
        {"observations": nd}, use_bin_type=True))
    bad = dict(state, _observation_space={"space": "box", "low": "AAAA", "high": "AAAA",
                                          "shape": [1 << 30], "dtype": "<f4"})
    ep("space", "Box of 2^30 elements", encode_state(bad))
    bomb = base64.b64encode(zlib.compress(b"\0" * (64 << 20))).decode()
    bad = dict(state, _observation_space={"space": "box", "low": bomb, "high": bomb,
                                          "shape": [4], "dtype": "<f4"})
    ep("space", "zlib bomb bounds (64 MB)", encode_state(bad))
    deep = {"space": "tuple", "spaces": []}
    for _ in range(200):
        deep = {"space": "tuple", "spaces": [deep]}
    ep("space", "space nested 200 deep", encode_state(dict(state, _observation_space=deep)))
    ep("values", "rewards as strings", encode_state(dict(state, rewards=["x"] * len(
        state["rewards"]))))
    ep("values", "observations buffer is a string", encode_state(dict(
        state, observations="not a buffer")))
    ep("values", "t_started is a string", encode_state(dict(state, t_started="x")))
    ep("values", "action outside the stored Discrete(2)", encode_state(dict(
        state, _action_space={"space": "discrete", "n": 2, "start": 0},
        actions=dict(state["actions"], data=np.full_like(state["actions"]["data"], 5)))))

    # tabular: compressed cells, shape metadata, wrong types
    cells = _tabular_base()
    cells["obs"] = [base64.b64encode(lz4.frame.compress(pickle.dumps(_RunsCode(marker))))
                    .decode()] * 3
    tab("pickle", "compressed cell: pickle that runs code", cells)
    cells = _tabular_base()
    recon = pickle.dumps(np.zeros(4, np.float32), protocol=2)
    cells["obs"] = [base64.b64encode(lz4.frame.compress(recon)).decode()] * 3
    tab("pickle", "compressed cell: ndarray reconstruction", cells)
    frame = bytearray(lz4.frame.compress(b"\0" * 64, store_size=True))
    frame[6:14] = struct.pack("<Q", 1 << 40)  # claimed content size: 1 TB
    cells = _tabular_base()
    cells["obs"] = [base64.b64encode(bytes(frame)).decode()] * 3
    tab("lz4", "lz4 frame claiming 1 TB", cells)
    big = lz4.frame.compress(b"\0" * (256 << 20))
    cells = _tabular_base()
    cells["obs"] = [base64.b64encode(big).decode()] * 3
    tab("lz4", "lz4 bomb (256 MB of zeros)", cells)
    for label, meta in (("shape not a list", b'{"a": 1}'), ("negative shape", b"[-1]"),
                        ("float shape", b"[2.5, 2]"), ("shape 2^40", b"[1099511627776]"),
                        ("shape nested 100k deep", b"[" * 100_000)):
        cells = _tabular_base()
        tab("shape metadata", f"tensor {label}", cells,
            {"obs": {b"ARROW:extension:metadata": meta}})
    for label, col, values in (
            ("rewards as strings", "rewards", ["a", "b", "c"]),
            ("rewards null", "rewards", [1.0, None, 1.0]),
            ("reward NaN", "rewards", [1.0, float("nan"), 1.0]),
            ("action out of Discrete(2)", "actions", [0, 7, 1]),
            ("obs NaN", "obs", [[0.1, float("nan"), 0.3, 0.4]] * 3),
            ("obs wrong shape", "obs", [[0.1, 0.2]] * 3),
            ("eps_id null", "eps_id", ["a", None, "a"])):
        cells = _tabular_base()
        cells[col] = values
        if label.startswith("obs"):
            cells["new_obs"] = values
        tab("values", f"tabular {label}", cells)

    # SampleBatch JSON
    js("json", "JSON nested 100k deep", b'{"obs": ' + b"[" * 100_000 + b"\n")
    js("json", "non-UTF-8 bytes", b'{"obs": "\xff\xfe"}\n')
    line = sample_batch_line().replace('"actions": [', '"actions": ["x", ')
    js("json", "actions as strings", line.encode() + b"\n")
    js("json", "columns of different lengths", b'{"obs": [[1.0], [2.0]], "actions": [0], '
       b'"rewards": [1.0, 2.0]}\n')
    js("json", "MultiAgentBatch without policy_batches", b'{"type": "MultiAgentBatch"}\n')
    js("json", "not a batch", b"[1, 2, 3]\n")
    return out


# ---------------------------------------------------------------------- checkpoint crashes

# For k = 1, 2, ...: saves generation 1 into `<folder>/c<k>`, then forks a child that saves
# generation 2 with every file-system operation of the save counted; at operation k the child
# dies on the spot (os._exit: no cleanup, no finally blocks), after writing half of the bytes
# when the operation is a write. Stops at the first k the save survives. One interpreter
# imports everything once; each crash costs a fork.
_CRASHER = _dedent("""
    import builtins, json, os, shutil, sys
    import numpy as np
    from rljax_offline.learning import checkpoint as ckpt

    folder = sys.argv[1]
    def state(seed):
        rng = np.random.default_rng(seed)
        return {"w": rng.normal(size=(64, 32)).astype(np.float32), "step": np.int64(seed)}

    def crash_during_save(path, crash_at):
        count = [0]
        def tick():
            count[0] += 1
            return count[0] == crash_at
        def counted(fn):
            def wrapper(*a, **k):
                if tick():
                    os._exit(0)
                return fn(*a, **k)
            return wrapper
        class TornFile:
            def __init__(self, f):
                self.f = f
            def write(self, data):
                if tick():
                    self.f.write(data[: len(data) // 2]); self.f.flush(); os._exit(0)
                return self.f.write(data)
            def __getattr__(self, name):
                return getattr(self.f, name)
            def __enter__(self):
                return self
            def __exit__(self, *exc):
                return self.f.__exit__(*exc)
        real_open = builtins.open
        def torn_open(*a, **k):
            if tick():
                os._exit(0)
            return TornFile(real_open(*a, **k))
        for mod, name in ((os, "rename"), (os, "replace"), (os, "fsync"), (os, "mkdir"),
                          (os, "remove"), (os, "unlink"), (os, "rmdir"), (shutil, "rmtree")):
            setattr(mod, name, counted(getattr(mod, name)))
        ckpt.open = torn_open
        ckpt.save_checkpoint(path, state(2), {"iteration": 2})
        os._exit(3)

    results, crash_at = [], 1
    while True:
        path = os.path.join(folder, f"c{crash_at}")
        ckpt.save_checkpoint(path, state(1), {"iteration": 1})
        pid = os.fork()
        if pid == 0:
            crash_during_save(path, crash_at)
        _, status = os.waitpid(pid, 0)
        completed = os.waitstatus_to_exitcode(status) == 3
        results.append([path, crash_at, completed])
        if completed or crash_at > 200:
            break
        crash_at += 1
    print(json.dumps(results))
""")


def checkpoint_state(seed):
    """A small state pytree whose values identify the save that wrote it."""
    rng = np.random.default_rng(seed)
    return {"w": rng.normal(size=(64, 32)).astype(np.float32), "step": np.int64(seed)}


def crash_checkpoint_saves(folder) -> list[tuple[str, int, bool]]:
    """(checkpoint path, crash point, whether the second save completed) for every crash
    point of a save (see `_CRASHER`); the last entry is the save that completed."""
    import subprocess

    out = subprocess.run([PYTHON, "-c", _CRASHER, str(folder)], env=subprocess_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return [tuple(r) for r in json.loads(out.stdout.strip().splitlines()[-1])]


# ---------------------------------------------------------------------- memory bound
#
# Peak memory of reading one input, measured in a forked child of a process that has already
# imported everything: the rise of the child's peak RSS (ru_maxrss) over its RSS at the fork.
# The bound of the issue: an input of N bytes may make the reader use 64 MB + 100 x N.

MEMORY_BOUND_BASE = 64 << 20
MEMORY_BOUND_FACTOR = 100


def memory_bound(nbytes: int) -> int:
    return MEMORY_BOUND_BASE + MEMORY_BOUND_FACTOR * nbytes


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_memory(read, path, baseline=None) -> tuple[str, int]:
    """(outcome, peak extra bytes) of `read(path)` in a forked child (Linux)."""
    import resource

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        outcome = "raw"
        try:
            start = _rss_bytes()
            outcome, _ = classify(read, path, baseline)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - start
        except BaseException:  # noqa: BLE001 - the child must always report and exit
            peak = -1
        os.write(w, json.dumps([outcome, max(peak, 0)]).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 4096):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    outcome, peak = json.loads(data or b'["killed", -1]')
    return outcome, peak


def memory_report(folder: str) -> list[dict]:
    """Peak memory of every crafted case and every undamaged format file, against the bound."""
    rows = []
    cases = [(c, n, p, r) for c, n, p, r in crafted_cases(folder)]
    cases += [("valid", name, p, r) for name, (p, r, _) in format_cases(folder).items()]
    for cls, name, path, read in cases:
        outcome, peak = peak_memory(read, path)
        size = os.path.getsize(path)
        rows.append({"class": cls, "name": name, "bytes": size, "outcome": outcome,
                     "peak": peak, "bound": memory_bound(size),
                     "within": 0 <= peak <= memory_bound(size)})
    return rows


if __name__ == "__main__":  # python tests/fault_testlib.py memory FOLDER -> JSON lines
    import warnings

    warnings.filterwarnings("ignore")
    if sys.argv[1] == "memory":
        for row in memory_report(sys.argv[2]):
            print(json.dumps(row), flush=True)
