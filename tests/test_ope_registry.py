"""Off-policy evaluation of every registered algorithm that acts: each one's policy (its
`ActingSpec`, a key-drawing one included: BCQ's candidates) runs through `ope.estimate` on
recorded data of each action space it accepts, from its registry line alone: FQE's estimate
is finite, and importance sampling covers every episode where the target has a density of the
recorded actions (a deterministic Box target is refused by a named error instead). The default
run checks CQL (both action spaces) and BCQ (acting draws with a key); CI, every name.

The policies are the algorithms' initial ones (no training: OPE's plumbing is what is under
test; the estimators' numbers are tests/test_ope_estimators.py's and test_ope_fqe.py's)."""

import numpy as np
import pytest
from learner_testlib import names_with_slow_marks

from rljax_offline import ope
from rljax_offline.acting.env_runner import record_expert
from rljax_offline.algorithms import registry
from rljax_offline.errors import ConfigError, OPEError

ENVS = {"CartPole-v1": dict(num_episodes=6, mix="expert:0.5,random:0.5"),
        "Pendulum-v1": dict(num_episodes=2, mix="expert:0.5,random:0.5")}
TINY = {"fcnet_hiddens": [8]}
METHODS = {"is": {"type": "is"},
           "fqe": {"type": "fqe", "num_updates": 10, "model_config": TINY}}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root = tmp_path_factory.mktemp("ope_registry")
    paths = {}
    for env, how in ENVS.items():
        paths[env] = str(root / env)
        record_expert(env, paths[env], seed=0, progress=False, **how)
    return paths


@pytest.mark.parametrize("env", list(ENVS))
@pytest.mark.parametrize("name", names_with_slow_marks(("cql", "bcq")))
def test_every_acting_algorithm_runs_through_off_policy_evaluation(name, env, recorded):
    try:
        algo = (registry.config_class(name)().environment(env).rl_module(model_config=TINY)
                .learners(num_devices=1).build())
    except ConfigError as e:  # the algorithm does not take this env's action space
        pytest.skip(str(e))
    policy = algo.policy()
    algo.stop()
    if policy.acting is None:
        pytest.skip(f"{name} has no acting spec")
    run = lambda methods: ope.estimate(policy, recorded[env], methods=methods, gamma=0.9,
                                       num_bootstrap=5)
    if env == "Pendulum-v1" and policy.acting.dist.kind == "deterministic":
        with pytest.raises(OPEError, match="deterministic Box target has none"):
            run({"is": METHODS["is"]})  # no density of the recorded actions: named, one line
        est = run({"fqe": METHODS["fqe"]})
    else:
        est = run(METHODS)
        assert est["is"]["num_episodes"] == ENVS[env]["num_episodes"]
    assert np.isfinite(est["fqe"]["v_target"]), est["fqe"]
