"""Several modules in one compiled update (`learning.multi_module`): stacked modules of one
spec under `vmap` and modules of different specs (other spaces, another algorithm) in the
same program equal their separate single-module updates (float64, within rounding);
`policies_to_train` leaves the others exactly as they were; one trace for all modules."""

import jax
import numpy as np
import pytest
from learner_testlib import ALGORITHM_CASES, max_diff, random_columns, spec_for, to_float64

from rljax_offline.learning.init import init_state
from rljax_offline.learning.multi_module import (
    check_policies_to_train,
    group_modules,
    init_multi_state,
    make_multi_update,
    unstack,
)
from rljax_offline.learning.update import make_update

TOL64 = 1e-9
CASE = {c[0]: c for c in ALGORITHM_CASES}


def _spec(case_id):
    _, config, spaces = CASE[case_id]
    return spec_for(config, spaces), spaces


def _batch(spec, spaces, seed, n=32):
    return to_float64(random_columns(spec.data.columns, *spaces, n, seed))


def _stack(trees):
    return jax.tree_util.tree_map(lambda *xs: np.stack(xs), *trees)


def test_stacked_and_heterogeneous_modules_equal_their_separate_updates():
    iql, iql_spaces = _spec("iql-box")
    bc, bc_spaces = _spec("bc-discrete")
    specs = {"m0": iql.learning, "m1": iql.learning, "m2": iql.learning, "bc": bc.learning}
    groups = group_modules(specs)
    assert {n: g.module_ids for n, g in groups.items()} == {"m0": ("m0", "m1", "m2"),
                                                           "bc": ("bc",)}
    with jax.enable_x64(True):
        states = to_float64(init_multi_state(groups, seed=7))
        per_module = {m: _batch(iql, iql_spaces, seed=i) for i, m in enumerate(("m0", "m1",
                                                                                "m2"))}
        per_module["bc"] = _batch(bc, bc_spaces, seed=9)
        batches = {"m0": _stack([per_module[m] for m in ("m0", "m1", "m2")]),
                   "bc": _stack([per_module["bc"]])}
        traces = []

        def counted(states, batches):
            traces.append(1)
            return make_multi_update(groups, axis_name=None)(states, batches)

        step = jax.jit(counted)
        new, metrics = step(states, batches)
        new, metrics = step(new, batches)  # a second update: no new trace
        assert len(traces) == 1
        got = unstack(groups, jax.device_get(new))
        for module_id, spec in (("m0", iql), ("m1", iql), ("m2", iql), ("bc", bc)):
            single = jax.jit(make_update(spec.learning, axis_name=None))
            state = unstack(groups, states)[module_id]
            for _ in range(2):
                state, _ = single(state, per_module[module_id])
            diff = max(max_diff(jax.device_get(state).params, got[module_id].params),
                       max_diff(jax.device_get(state).opt_states, got[module_id].opt_states))
            assert diff < TOL64, (module_id, diff)
        assert set(metrics) == {"m0", "m1", "m2", "bc"}
        assert max_diff(got["m0"].params, got["m1"].params) > 1e-3  # own init, own rows


def test_policies_to_train_leaves_the_others_exactly_as_they_were():
    iql, spaces = _spec("iql-box")
    groups = group_modules({"a": iql.learning, "b": iql.learning})
    states = init_multi_state(groups)
    batches = {"a": _stack([random_columns(iql.data.columns, *spaces, 32, s) for s in (0, 1)])}
    new, metrics = jax.jit(lambda s, b: make_multi_update(groups, ["b"], axis_name=None)(s, b))(
        states, batches)
    got, before = unstack(groups, jax.device_get(new)), unstack(groups, states)
    for x, y in zip(jax.tree_util.tree_leaves(got["a"]), jax.tree_util.tree_leaves(before["a"])):
        np.testing.assert_array_equal(x, y)
    assert max_diff(got["b"].params, before["b"].params) > 0
    assert set(metrics) == {"b"}


def test_module_seeds_differ_and_match_init_state():
    iql, _ = _spec("iql-box")
    groups = group_modules({"a": iql.learning, "b": iql.learning})
    got = unstack(groups, init_multi_state(groups, seed=3))
    assert max_diff(got["b"].params, jax.device_get(init_state(iql.learning, 4)).params) == 0


@pytest.mark.parametrize("chosen, message", [
    (["c"], "policies_to_train names modules ['c'] that do not exist"),
    ([], "policies_to_train names no module"),
])
def test_policies_to_train_is_checked(chosen, message):
    iql, _ = _spec("iql-box")
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_policies_to_train(group_modules({"a": iql.learning}), chosen)


def test_the_multi_module_runtime_on_eight_devices_equals_one():
    """`MultiModuleParallel.scan_on_device`: 3 stacked IQL modules and a BC module, each
    sampling its own data on the devices (rows sharded, 250 and 100 rows: padding never
    drawn), 8 devices against 1, float64."""
    from rljax_offline.learning.data_parallel import select_devices
    from rljax_offline.learning.multi_data_parallel import MultiModuleParallel

    iql, iql_spaces = _spec("iql-box")
    bc, bc_spaces = _spec("bc-discrete")
    specs = {"m0": iql.learning, "m1": iql.learning, "m2": iql.learning, "bc": bc.learning}
    groups = group_modules(specs)
    with jax.enable_x64(True):
        columns = {m: to_float64(random_columns(iql.data.columns, *iql_spaces, 250, seed=i))
                   for i, m in enumerate(("m0", "m1", "m2"))}
        columns["bc"] = to_float64(random_columns(bc.data.columns, *bc_spaces, 100, seed=5))
        out = {}
        for n in (1, 8):
            runtime = MultiModuleParallel(groups, select_devices(n), {"m0": 32, "bc": 16},
                                          policies_to_train=["m0", "m2", "bc"])
            states = runtime.put_replicated(to_float64(init_multi_state(groups, seed=3)))
            data = runtime.put_data(columns, {})
            states, metrics = runtime.scan_on_device(states, data, 4)
            out[n] = jax.device_get(states)
            assert set(metrics) == {"m0", "m2", "bc"}
        diff = max_diff(out[1], out[8])
        print(f"multi-module runtime, 8 devices vs 1 (float64): {diff:.3g}")
        assert diff < TOL64
        before = to_float64(init_multi_state(groups, seed=3))
        assert max_diff(unstack(groups, out[8])["m1"].params,
                        unstack(groups, before)["m1"].params) == 0.0
