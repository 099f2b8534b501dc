"""Multi-agent Parquet format: round trips of the RLlib-recorded traces (hanging actions, late
joiners, early terminations, chunks), byte-identical agent rows that the single-agent reader
reads, global state, and named errors naming file, row and agent."""

from __future__ import annotations

import glob
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import test_multi_agent_episode_rllib as T

from rljax_offline.data import read_episodes
from rljax_offline.data.codec import decode_episode, encode_episode
from rljax_offline.data.multi_agent_io import (
    MultiAgentEpisodeWriter,
    read_multi_agent_episodes,
    write_multi_agent_episodes,
)
from rljax_offline.errors import OfflineDataError

fixture = T.fixture


def _episodes(fx, n=60):
    out = []
    for i, tr in enumerate(fx["traces"][:n]):
        if tr["rllib_error"] is not None:
            continue
        out.append((i, T.build(fx, i, tr["steps"]).finalize()))
        if tr.get("chunks"):
            first, successor, second = T._chunks(fx, i)
            out += [(i, first), (i, second)]
    return out


def test_round_trip_keeps_every_getter_answer(fixture, tmp_path):
    eps = _episodes(fixture)
    files = write_multi_agent_episodes([e for _, e in eps], str(tmp_path),
                                       max_episodes_per_file=40, row_group_size=7)
    assert len(files) == 2 * -(-len(eps) // 40)
    back = read_multi_agent_episodes(str(tmp_path))
    assert len(back) == len(eps)
    for (i, ours), got in zip(eps, back):
        assert T.summary(got) == T.summary(ours)
        for q in fixture["traces"][i]["full"]["queries"]:
            try:
                want = T.enc(T.run_query(ours, q))
            except Exception as e:  # noqa: BLE001
                want = type(e).__name__
            try:
                res = T.enc(T.run_query(got, q))
            except Exception as e:  # noqa: BLE001
                res = type(e).__name__
            assert res == want, (i, q)


def test_agent_rows_are_single_agent_rows(fixture, tmp_path):
    """The `item` column re-encodes byte for byte and is what the single-agent writer writes;
    the single-agent reader, pointed at agents/, reads one episode per agent row."""
    eps = [e for _, e in _episodes(fixture, 12)]
    write_multi_agent_episodes(eps, str(tmp_path))
    (agents_file,) = glob.glob(str(tmp_path / "agents" / "*.parquet"))
    table = pq.read_table(agents_file)
    items = table.column("item").to_pylist()
    expected = [encode_episode(T.with_rllib_action_dtype(sa)) for ep in eps
                for sa in ep.agent_episodes.values()]
    assert items == expected
    for blob in items:
        assert encode_episode(decode_episode(blob)) == blob
    single = read_episodes(str(tmp_path / "agents"))
    assert [(e.agent_id, e.multi_agent_episode_id, len(e)) for e in single] == [
        (a, ep.id_, len(sa)) for ep in eps for a, sa in ep.agent_episodes.items()]
    meta = pq.read_schema(agents_file).metadata
    assert b"rljax_offline.multi_agent_schema" in meta


def test_global_state_round_trip(fixture, tmp_path):
    _, ep = _episodes(fixture, 3)[0]
    state = np.arange((len(ep) + 1) * 3, dtype=np.float32).reshape(len(ep) + 1, 3)
    with MultiAgentEpisodeWriter(str(tmp_path)) as w:
        w.write(ep, global_state=state)
        w.write(ep.replace(id_="other"))
    a, b = read_multi_agent_episodes(str(tmp_path))
    np.testing.assert_array_equal(a.custom_data["global_state"], state)
    assert "global_state" not in b.custom_data


def _rewrite(path, fn):
    table = pq.read_table(path)
    meta = table.schema.metadata
    table = fn(table).replace_schema_metadata(meta)
    os.remove(path)
    pq.write_table(table, path)


def test_named_errors_name_file_row_and_agent(fixture, tmp_path):
    eps = [e for _, e in _episodes(fixture, 6)]
    write_multi_agent_episodes(eps, str(tmp_path))
    (agents_file,) = glob.glob(str(tmp_path / "agents" / "*.parquet"))
    (env_file,) = glob.glob(str(tmp_path / "env" / "*.parquet"))
    name = os.path.basename(agents_file)

    # an agent row whose state belongs to another agent
    def swap_agent(t):
        col = t.column("agent_id").to_pylist()
        col[1] = "zz"
        return t.set_column(t.schema.get_field_index("agent_id"), "agent_id",
                            pa.array(col, pa.string()))
    _rewrite(agents_file, swap_agent)
    with pytest.raises(OfflineDataError, match=rf"{name}.*row 1.*agent 'zz'"):
        read_multi_agent_episodes(str(tmp_path))

    # a corrupt episode payload
    write_multi_agent_episodes(eps, str(tmp_path / "b"))
    (agents_b,) = glob.glob(str(tmp_path / "b" / "agents" / "*.parquet"))

    def corrupt(t):
        col = t.column("item").to_pylist()
        col[2] = b"\xc1garbage"
        return t.set_column(0, "item", pa.array(col, pa.binary()))
    _rewrite(agents_b, corrupt)
    with pytest.raises(OfflineDataError, match=r"row 2"):
        read_multi_agent_episodes(str(tmp_path / "b"))

    # a missing env record / env file
    os.remove(env_file)
    with pytest.raises(OfflineDataError, match="no paired env/ file"):
        read_multi_agent_episodes(str(tmp_path))
    with pytest.raises(OfflineDataError, match="no agents"):
        read_multi_agent_episodes(str(tmp_path / "nothing"))


def test_rllib_single_agent_decoder_reads_our_agent_rows():
    """`fixtures/multi_agent/agent_rows` (our writer) as RLlib 2.60's OfflinePreLearner
    decoded it (`rllib_read_agent_rows.py`): same agents, steps, values and returns."""
    import json

    with open(os.path.join(T.HERE, "rllib_read_agent_rows.json")) as f:
        rllib = json.load(f)
    ours = read_episodes(os.path.join(T.HERE, "agent_rows", "agents"))
    assert len(ours) == len(rllib) >= 30
    for e, r in zip(ours, rllib):
        assert (e.id_, e.agent_id, e.module_id, e.multi_agent_episode_id, len(e), e.t_started,
                e.is_terminated, e.is_truncated) == (
            r["id_"], r["agent_id"], r["module_id"], r["multi_agent_episode_id"], r["len"],
            r["t_started"], r["terminated"], r["truncated"])
        np.testing.assert_array_equal(e.get_observations(), np.asarray(r["observations"]))
        assert e.get_actions().tolist() == r["actions"]
        assert e.get_rewards().tolist() == r["rewards"]
        assert float(e.get_return()) == r["return"]
    assert len(read_multi_agent_episodes(os.path.join(T.HERE, "agent_rows"))) == 12


def test_tabular_layout_reads_as_one_episode_per_agent(fixture, tmp_path):
    from rljax_offline.data.multi_agent_tabular import write_multi_agent_tabular

    # whole episodes only (a chunk shares its agent episodes' ids with the whole episode)
    eps = [T.build(fixture, i, tr["steps"]).finalize()
           for i, tr in enumerate(fixture["traces"][:8]) if tr["rllib_error"] is None]
    files = write_multi_agent_tabular(eps, str(tmp_path))
    assert sorted(os.path.basename(os.path.dirname(f)) for f in files) == ["m0", "m1"]
    for f in files:
        mid = os.path.basename(os.path.dirname(f))
        table = pq.read_table(f)
        assert {"eps_id", "agent_id", "module_id", "obs", "actions", "rewards", "new_obs",
                "terminateds", "truncateds", "agent_index", "env_t"} <= set(table.column_names)
        got = read_episodes(os.path.dirname(f), input_read_episodes=False)
        want = [(ep, a, sa) for ep in eps for a, sa in sorted(ep.agent_episodes.items())
                if sa.module_id == mid and len(sa) > 0]
        assert len(got) == len(want)
        by_id = {g.id_: g for g in got}  # the reader yields episodes as they finish
        for ep, a, sa in want:
            g = by_id[sa.id_]
            assert len(g) == len(sa)
            np.testing.assert_array_equal(g.get_observations(), sa.get_observations())
            np.testing.assert_array_equal(g.get_rewards(), sa.get_rewards())
            assert set(g.extra_model_outputs) >= {"agent_index", "env_t", "logp"}
            assert g.get_extra_model_outputs("agent_index").tolist() == [
                sorted(ep.agent_episodes).index(a)] * len(sa)
            # env_t: the env step of each row's observation, from the env-step map
            obs_env_steps = g.get_extra_model_outputs("env_t")
            np.testing.assert_array_equal(g.get_observations()[:-1, 0], obs_env_steps)


def test_tabular_writer_streams_row_groups_and_names_a_module_of_mixed_shapes(fixture,
                                                                             tmp_path):
    from rljax_offline.data.multi_agent_tabular import write_multi_agent_tabular
    from rljax_offline.episode.multi_agent_builder import MultiAgentEpisodeBuilder
    from rljax_offline.errors import OfflineDataError

    eps = [T.build(fixture, i, tr["steps"]).finalize()
           for i, tr in enumerate(fixture["traces"][:8]) if tr["rllib_error"] is None]
    small = write_multi_agent_tabular(eps, str(tmp_path / "small"), row_group_rows=5)
    whole = write_multi_agent_tabular(eps, str(tmp_path / "whole"))
    for a, b in zip(sorted(small), sorted(whole)):
        assert pq.ParquetFile(a).num_row_groups > 1 == pq.ParquetFile(b).num_row_groups
        assert pq.read_table(a).equals(pq.read_table(b))
    b = MultiAgentEpisodeBuilder("mixed", agent_to_module_mapping_fn=lambda a, e: "m")
    b.add_env_reset(observations={"x": np.zeros(2, np.float32), "y": np.zeros(3, np.float32)})
    b.add_env_step({"x": np.ones(2, np.float32), "y": np.ones(3, np.float32)},
                   {"x": 0, "y": 1}, {"x": 1.0, "y": 0.0})
    with pytest.raises(OfflineDataError, match="module 'm': its agents' rows do not share"):
        write_multi_agent_tabular([b.finalize()], str(tmp_path / "mixed"))
    leftovers = [p for p in (tmp_path / "mixed").rglob("*") if p.is_file()]
    assert leftovers == []
