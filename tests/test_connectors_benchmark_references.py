"""The two numpy references of benchmarks/connector_throughput.py compute what the jitted
learner pipeline computes (frame stacking + the per-step mean-std filter, RLlib's semantics),
on episodes with lookback, so the ratios the benchmark prints compare equal work."""

import pathlib
import sys

import numpy as np
import pytest
from connector_testlib import ACT, OBS, random_episodes, real_rows, run_jit

from rljax_offline.connectors import Spaces, default_learner, frame_stack, mean_std_filter

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import connector_throughput as bench  # noqa: E402

SPACES = Spaces.of(OBS, ACT)


@pytest.mark.parametrize("reference", [bench.rllib_way, bench.vectorized])
def test_reference_matches_the_jitted_pipeline(reference):
    eps = random_episodes(n=6, seed=11, max_len=20)
    pipe = default_learner(SPACES, frame_stack(bench.K), mean_std_filter(as_learner_connector=True))
    _, batch, state = run_jit(pipe, SPACES, eps)
    stats = state[1]  # the filter, after frame_stack
    got, want = real_rows(batch), reference(eps)
    for k in ("obs", "new_obs"):  # float32 statistics against float64 ones
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-4, err_msg=k)
    for k in ("actions", "rewards", "terminateds", "truncateds"):
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    assert int(stats.count) == sum(len(ep) + 1 for ep in eps)


def test_rllib_way_stacks_frames_as_rllibs_learner_connector():
    """The strided view equals RLlib's per-step definition: the K observations up to each
    one, lookback included, zeros before the first available."""
    for ep in random_episodes(n=4, seed=12, max_len=9):
        stacked = bench.stacked_observations(ep)
        for t in range(len(ep) + 1):
            want = ep.get_observations(slice(t - bench.K + 1, t + 1), neg_index_as_lookback=True,
                                       fill=0.0).reshape(-1)
            np.testing.assert_array_equal(stacked[t], want)
