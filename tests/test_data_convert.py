"""In-memory conversions: episodes <-> tabular tables, SampleBatch JSON lines -> episodes."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rljax_offline import Episode
from rljax_offline.data import (
    OfflineDataError,
    episodes_to_tabular,
    read_episodes,
    read_sample_batch_json,
    tabular_to_episodes,
)


def make_episodes(n=4, seed=1):
    rng = np.random.default_rng(seed)
    return [Episode(observations=rng.normal(size=(T + 1, 3)).astype(np.float32),
                    actions=rng.integers(0, 2, T).astype(np.int32), rewards=rng.normal(size=T),
                    terminated=i % 2 == 0, truncated=i % 2 == 1,
                    extra_model_outputs={"action_dist_inputs": rng.normal(size=(T, 2)).astype(
                        np.float32)})
            for i, T in enumerate(rng.integers(2, 20, n))]


def assert_same(a, b):
    assert a.id_ == b.id_ and len(a) == len(b)
    np.testing.assert_array_equal(a.observations, b.observations)
    np.testing.assert_array_equal(a.actions, b.actions)
    np.testing.assert_array_equal(a.rewards, b.rewards)
    assert set(a.extra_model_outputs) == set(b.extra_model_outputs)
    for k in a.extra_model_outputs:
        np.testing.assert_array_equal(a.extra_model_outputs[k], b.extra_model_outputs[k])
    assert (a.is_terminated, a.is_truncated) == (b.is_terminated, b.is_truncated)


def test_fixture_tabular_table_converts_to_fixture_episodes(rllib_fixtures):
    (path,) = (rllib_fixtures / "tabular_uncompressed").rglob("*.parquet")
    eps = tabular_to_episodes(pq.read_table(path))
    ref = {e.id_: e for e in read_episodes(rllib_fixtures / "episodes")}
    assert [e.id_ for e in eps] == (rllib_fixtures / "episode_ids_in_tabular.txt"
                                    ).read_text().split()
    assert sum(len(e) for e in eps) == 4367  # one row a step: not one step short
    for ep in eps:
        assert_same(ep, ref[ep.id_])


@pytest.mark.parametrize("compress", [None, ["obs", "new_obs"]])
def test_round_trip_split_and_interleaved(compress):
    eps = make_episodes()
    table = episodes_to_tabular(eps, output_compress_columns=compress)
    assert table.num_rows == sum(len(e) for e in eps)
    if compress is None:
        assert pa.types.is_fixed_size_list(table.schema.field("obs").type)
        assert table.schema.field("obs").metadata[b"ARROW:extension:metadata"] == b"[3]"
    # Interleave rows of all episodes (time order kept per episode), then split in two tables.
    ids = np.asarray(table.column("eps_id").to_pylist())
    step = np.concatenate([np.arange(len(e)) for e in eps])
    order = np.lexsort((ids, step))
    mixed = table.take(pa.array(order))
    half = mixed.num_rows // 2
    back = {e.id_: e for e in tabular_to_episodes([mixed.slice(0, half), mixed.slice(half)])}
    for ep in eps:
        assert_same(back[ep.id_], ep)


def test_unfinished_episode_is_returned_unfinished():
    (ep,) = make_episodes(1)
    table = episodes_to_tabular([ep]).slice(0, len(ep) - 1)  # the flagged last row is missing
    (back,) = tabular_to_episodes(table)
    assert len(back) == len(ep) - 1 and not back.is_done


def test_read_sample_batch_json(tmp_path):
    path = tmp_path / "batches.json"
    rows = [{"type": "SampleBatch", "obs": [[0.0], [1.0], [2.0]], "new_obs": [[1.0], [2.0], [3.0]],
             "actions": [1, 0, 1], "rewards": [0.5, 0.5, 1.0], "dones": [False, False, False],
             "eps_id": [3, 3, 3], "action_prob": [0.9, 0.8, 0.7]}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    (ep,) = list(read_sample_batch_json(str(path)))
    assert len(ep) == 3 and not ep.is_done and ep.id_ == "3"
    np.testing.assert_array_equal(ep.observations[:, 0], [0, 1, 2, 3])
    np.testing.assert_allclose(ep.extra_model_outputs["action_prob"], [0.9, 0.8, 0.7])
    path.write_text('{"obs": [[0.0]], "actions": [0]}\n')
    with pytest.raises(OfflineDataError, match=r"batches.json.*line 1.*column 'rewards'"):
        list(read_sample_batch_json(str(path)))
