"""N seeds in one program (`learning.seeds`): for every registered algorithm (the
cross-cutting `ALGORITHM_CASES`), 2 seeds trained together (a leading seed axis, one
`vmap`ped scan of on-device updates) end with each seed's params, optimizer states and
metrics equal to its own separate run, in float64 (summation order only, as across devices);
with the data sharded over 8 devices too (one case)."""

import jax
import numpy as np
import pytest
from learner_testlib import (
    ALGORITHM_CASES,
    DEFAULT_RUN_CASES,
    case_ids,
    max_diff,
    random_columns,
    spec_for,
    to_float64,
    with_slow_marks,
)

from rljax_offline.learning.data_parallel import DataParallel, select_devices
from rljax_offline.learning.init import init_state
from rljax_offline.learning.seeds import init_seed_states, scan_over_seeds, seed_slice

TOL64 = 1e-9
SEEDS = (0, 5)


@pytest.fixture(params=with_slow_marks(), ids=case_ids())
def case(request):
    return request.param


def test_seeds_in_one_program_equal_separate_runs(case):
    _, config, spaces = case
    spec = spec_for(config, spaces)
    data = random_columns(spec.data.columns, *spaces, 120, 0)
    with jax.enable_x64(True):
        # every algorithm on one device; over 8 devices (the seed axis inside each device's
        # program) for the first of the default run's cases
        for n_dev in (1, 8) if case[0] == DEFAULT_RUN_CASES[0] else (1,):
            dp = DataParallel(spec.learning, select_devices(n_dev), 32)
            on_device = dp.put_data(to_float64(data))
            first = init_seed_states(spec.learning, SEEDS)
            for i, seed in enumerate(SEEDS):  # seed i starts where its own run starts
                assert max_diff(seed_slice(first, i).params,
                                init_state(spec.learning, seed).params) == 0.0
            states = dp.put_replicated(to_float64(first))
            states, metrics = scan_over_seeds(dp, 4)(states, on_device)
            states, metrics = jax.device_get((states, metrics))
            assert np.shape(states.step) == (len(SEEDS),)
            one = dp.scan_on_device(4)
            for i, seed in enumerate(SEEDS):
                alone = dp.put_replicated(to_float64(init_state(spec.learning, seed)))
                alone, alone_m = jax.device_get(one(alone, on_device))
                mine = seed_slice(states, i)
                diff = max_diff(alone.params, mine.params)
                assert diff < TOL64, (case[0], n_dev, seed, diff)
                assert max_diff(alone.opt_states, mine.opt_states) < TOL64
                for k, v in alone_m.items():
                    np.testing.assert_allclose(seed_slice(metrics, i)[k], v, rtol=1e-9,
                                               atol=1e-9, err_msg=k)
        # the seeds are independent runs: other draws, other params
        assert max_diff(seed_slice(states, 0).params, seed_slice(states, 1).params) > 1e-6


def test_seed_list_is_checked():
    _, config, spaces = ALGORITHM_CASES[0]
    with pytest.raises(ValueError, match="non-empty"):
        init_seed_states(spec_for(config, spaces).learning, [])
