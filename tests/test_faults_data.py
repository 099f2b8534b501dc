"""Fault injection on the data layer: seeded byte mutations of real files of every format,
crafted hostile payloads (named errors, no code run, memory within 64 MB + 100 x input bytes),
skip mode over every format, writers killed with SIGKILL, two writers into one folder."""

import json
import os
import signal
import subprocess

import numpy as np
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from fault_testlib import (
    PYTHON,
    REPO,
    cartpole_episodes,
    fingerprint,
    mutate,
    mutation_outcomes,
    sample_batch_line,
    subprocess_env,
)

from rljax_offline.data import (
    SkipReport,
    convert_dataset,
    inspect_dataset,
    read_episodes,
    read_sample_batch_json,
    write_episodes,
)
from rljax_offline.errors import IntegrityError, OfflineDataError, OutputExistsError

MUTATIONS_PER_FORMAT = 12  # benchmarks/faults.py runs many more


def test_seeded_mutations_of_every_format_are_named_or_equal(tmp_path):
    results = mutation_outcomes(str(tmp_path), MUTATIONS_PER_FORMAT, seed=11)
    assert len(results) == 8
    for name, counts in results.items():
        assert counts["raw"] == 0, (name, counts["examples"])
        if counts["checksummed"]:  # our files: a damaged byte can never give other numbers
            assert counts["silent"] == 0, (name, counts["examples"])
        assert counts["named"] > 0, name


def test_crafted_payloads_are_named_errors_within_the_memory_bound(tmp_path):
    out = subprocess.run([PYTHON, os.path.join(REPO, "tests", "fault_testlib.py"), "memory",
                          str(tmp_path)], env=subprocess_env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(rows) > 40
    for row in rows:
        want = "silent" if row["class"] == "valid" else "named"  # "silent": read fine
        assert row["outcome"] == want, row
        assert row["within"], row
    assert not (tmp_path / "CODE_RAN").exists()


def test_pickles_are_unsafe_payload_errors(tmp_path):
    from fault_testlib import crafted_cases

    from rljax_offline.errors import UnsafePayloadError

    cases = [c for c in crafted_cases(str(tmp_path)) if c[0] == "pickle"]
    assert len(cases) == 3
    for _, name, path, read in cases:
        with pytest.raises(UnsafePayloadError):
            read(path)
            pytest.fail(name)
    assert not (tmp_path / "CODE_RAN").exists()


def test_flipped_bit_in_our_file_is_an_integrity_error(tmp_path):
    (f,) = write_episodes(cartpole_episodes(4), tmp_path / "d", output_write_episodes=False,
                          compression="none")
    meta = pq.read_metadata(f)
    col = meta.row_group(0).column(3)  # obs values: a data page in the middle of the file
    data = bytearray(open(f, "rb").read())
    data[col.data_page_offset + col.total_compressed_size - 8] ^= 0x10
    open(f, "wb").write(bytes(data))
    with pytest.raises(IntegrityError, match="checksum"):
        read_episodes(f, input_read_episodes=False)


def _split_tabular(tmp_path, n_files=3):
    """RLlib-style tabular data whose episodes span files (rows cut at fixed counts)."""
    eps = cartpole_episodes(6, seed=3, length=20)
    from rljax_offline.data import episodes_to_tabular

    table = episodes_to_tabular(eps)
    folder = tmp_path / "tab"
    folder.mkdir()
    bounds = np.linspace(0, table.num_rows, n_files + 1).astype(int)
    paths = []
    for i in range(n_files):
        path = folder / f"part-{i}.parquet"
        pq.write_table(table.slice(bounds[i], bounds[i + 1] - bounds[i]), path)
        paths.append(path)
    ids_per_file = [set(pq.read_table(p).column("eps_id").to_pylist()) for p in paths]
    return eps, folder, paths, ids_per_file


@pytest.mark.parametrize("bad_index", [0, 1])
def test_skip_mode_drops_episodes_cut_by_a_bad_tabular_file_whole(tmp_path, bad_index):
    eps, folder, paths, ids_per_file = _split_tabular(tmp_path)
    paths[bad_index].write_bytes(mutate(paths[bad_index].read_bytes()[:200],
                                        np.random.default_rng(0)))
    skipped = SkipReport()
    got = read_episodes(folder, input_read_episodes=False, on_bad_file="skip", skipped=skipped)
    assert [f for f, _ in skipped] == [str(paths[bad_index])]
    touched = ids_per_file[bad_index]
    dropped = {e for e, _ in skipped.dropped_episodes}
    elsewhere = set().union(*(ids for i, ids in enumerate(ids_per_file) if i != bad_index))
    assert touched & elsewhere and touched & elsewhere <= dropped  # the cut ones, named
    want = [ep for ep in eps if ep.id_ not in dropped | touched]
    assert fingerprint(got) == fingerprint(want)  # every other episode whole, none cut
    assert len(want) >= len(eps) - len(touched) - 1
    with pytest.raises(OfflineDataError, match=paths[bad_index].name):
        read_episodes(folder, input_read_episodes=False)


def test_skip_mode_for_episode_rows_json_and_inspect_with_a_bad_first_file(tmp_path):
    good = write_episodes(cartpole_episodes(3, seed=1), tmp_path / "e", run_id="b")
    bad = tmp_path / "e" / "aaa_first.parquet"
    bad.write_bytes(b"PAR1 not really")
    info = inspect_dataset(str(tmp_path / "e"), on_bad_file="skip")
    assert info["episodes"] == 3 and info["schema"] == {"item": "binary"}
    assert info["skipped_files"][0][0] == str(bad)
    good_json, bad_json = tmp_path / "a.json", tmp_path / "b.json"
    good_json.write_text(sample_batch_line(seed=1) + "\n")
    bad_json.write_text(sample_batch_line(seed=2) + "\n{not json\n")
    skipped = SkipReport()
    files = convert_dataset([str(bad_json), str(good_json)], str(tmp_path / "out"),
                            to="episodes", on_bad_file="skip", skipped=skipped)
    assert len(read_episodes(files)) == 1 and skipped[0][0] == str(bad_json)
    with pytest.raises(OfflineDataError, match=r"b.json', line 2: not JSON"):
        list(read_sample_batch_json(str(bad_json)))
    assert len(good) == 1


def test_multi_agent_batch_lines(tmp_path):
    line = json.dumps({"type": "MultiAgentBatch", "count": 5, "policy_batches": {
        "p0": json.loads(sample_batch_line(3, seed=1)),
        "p1": json.loads(sample_batch_line(2, seed=2))}})
    (tmp_path / "ma.json").write_text(line + "\n")
    eps = list(read_sample_batch_json(str(tmp_path / "ma.json")))
    assert [(e.module_id, len(e)) for e in eps] == [("p0", 3), ("p1", 2)]


# ---------------------------------------------------------------------- writers

_WRITER = """
import sys, time
sys.path.insert(0, sys.argv[4])
from fault_testlib import cartpole_episodes
from rljax_offline.data import EpisodeWriter
folder, seed, delay = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
hold = int(sys.argv[5]) if len(sys.argv) > 5 else -1
with EpisodeWriter(folder, output_max_rows_per_file=3, row_group_size=1) as w:
    for i, ep in enumerate(cartpole_episodes(12, seed=seed)):
        w.write(ep)
        if i == hold:  # tell the test, then wait for its SIGKILL
            print("WROTE", i, flush=True)
            sys.stdin.readline()
        time.sleep(delay)
print("DONE")
"""


def _writer(folder, seed, delay, hold=None):
    extra = [] if hold is None else [str(hold)]
    return subprocess.Popen([PYTHON, "-c", _WRITER, str(folder), str(seed), str(delay),
                             os.path.join(REPO, "tests"), *extra], env=subprocess_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_concurrent_writers_and_an_earlier_run_lose_nothing(tmp_path):
    folder = tmp_path / "shared"
    write_episodes(cartpole_episodes(2, seed=9), folder)  # an earlier run
    procs = [_writer(folder, seed, 0.01) for seed in (1, 2)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and "DONE" in out, err[-2000:]
    ids = sorted(ep.id_ for ep in read_episodes(folder))
    want = sorted(ep.id_ for s, n in ((9, 2), (1, 12), (2, 12))
                  for ep in cartpole_episodes(n, seed=s))
    assert ids == want


def test_writer_killed_mid_file_leaves_only_complete_files(tmp_path):
    rng = np.random.default_rng(5)
    folder = tmp_path / "w"
    write_episodes(cartpole_episodes(2, seed=9), folder)
    earlier, published = len(list(folder.iterdir())), 0
    for trial in range(2):
        # Killed after episode `hold` of 12, 3 to a file: 1 or 2 rows into an unpublished file.
        hold = int(rng.choice([i for i in range(11) if i % 3 != 2]))
        proc = _writer(folder, 1 + trial, 0.0, hold)
        line = proc.stdout.readline()
        assert line.split() == ["WROTE", str(hold)], proc.stderr.read()[-2000:]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        temps = [p for p in folder.iterdir() if p.name.startswith(".")]
        assert temps, "the kill landed between files"  # a file was being written
        visible = [p for p in folder.iterdir() if not p.name.startswith(".")]
        published += hold // 3  # the files this writer finished before the one it was on
        assert len(visible) == earlier + published
        for path in visible:  # every visible file is complete and readable
            assert pq.read_metadata(path).num_rows in (2, 3), path
        assert all(len(read_episodes(p)) > 0 for p in visible)
    # The next writer removes the temp files the killed ones left; earlier files stay.
    write_episodes(cartpole_episodes(1, seed=4), folder)
    assert not [p for p in folder.iterdir() if p.name.startswith(".")]
    assert {"ep9-0", "ep9-1", "ep4-0"} <= {ep.id_ for ep in read_episodes(folder)}


def test_publishing_never_overwrites_and_convert_refuses_its_input(tmp_path):
    from rljax_offline.data.files import atomic_output

    target = tmp_path / "x.parquet"
    target.write_bytes(b"keep me")
    with pytest.raises(OutputExistsError):
        with atomic_output(pafs.LocalFileSystem(), str(target)) as out:
            out.write(b"new")
    assert target.read_bytes() == b"keep me"
    assert os.listdir(tmp_path) == ["x.parquet"]
    data = tmp_path / "data"
    write_episodes(cartpole_episodes(2), data)
    for output in (data, data / "inside"):
        with pytest.raises(OutputExistsError, match="inside"):
            convert_dataset(str(data), str(output), to="tabular")


def test_fifo_input_is_refused_not_a_hang(tmp_path):
    fifo = tmp_path / "pipe.parquet"
    os.mkfifo(fifo)
    with pytest.raises(OfflineDataError, match="not a regular file"):
        read_episodes(fifo)
    with pytest.raises(OfflineDataError, match="not a regular file"):
        read_episodes("/dev/zero")


def test_multi_agent_batch_two_agents_one_policy_read_as_two_episodes(tmp_path):
    """Old-stack MultiAgentBatch: agents 0 and 1 of one eps_id share policy p0 (rows
    interleaved, as RLlib's collector can write them): two episodes, not one."""
    rng = np.random.default_rng(0)
    T = 4
    obs = {k: rng.normal(size=(T + 1, 3)).round(3) for k in (0, 1)}
    order = [(k, t) for t in range(T) for k in (0, 1)]
    batch = {"obs": [obs[k][t].tolist() for k, t in order],
             "new_obs": [obs[k][t + 1].tolist() for k, t in order],
             "actions": [int(k) for k, _ in order], "rewards": [float(t) for _, t in order],
             "terminateds": [t == T - 1 for _, t in order],
             "truncateds": [False] * (2 * T), "eps_id": [7] * (2 * T),
             "agent_index": [k for k, _ in order]}
    line = json.dumps({"type": "MultiAgentBatch", "count": T,
                       "policy_batches": {"p0": batch}})
    (tmp_path / "ma2.json").write_text(line + "\n")
    eps = list(read_sample_batch_json(str(tmp_path / "ma2.json")))
    assert [(e.id_, e.agent_id, e.multi_agent_episode_id, e.module_id, len(e))
            for e in eps] == [("7_0", 0, "7", "p0", T), ("7_1", 1, "7", "p0", T)]
    for e in eps:
        k = e.agent_id
        np.testing.assert_allclose(e.get_observations(), obs[k])
        assert e.get_actions().tolist() == [k] * T and e.is_terminated
