"""Cal-QL: d3rlpy's defaults under CQL's names, the calibrated lower bound `max(Q, return to
go)` on the policy's values inside the CQL term (exactly CQL where the bound is below Q), the
one-line refusals, the values it learns (held up at the data's return where CQL keeps pushing
them down), and the start of online fine-tuning: SAC from a Cal-QL checkpoint.

(8 devices == 1, the three update modes, masked rows, checkpoints: the cross-cutting tests.)"""

import gymnasium as gym
import jax
import numpy as np
import pytest
from learner_testlib import max_diff
from offline_rl_testlib import run_updates, spec_of
from zoo_testlib import assert_one_line_config_error, box_refusals

from rljax_offline import SACConfig
from rljax_offline import spaces as sp
from rljax_offline.algorithms.cal_ql import CalQLConfig
from rljax_offline.algorithms.cql import CQLConfig
from rljax_offline.learning.init import init_state
from rljax_offline.learning.update import BatchAxis
from rljax_offline.models.actor_and_q import actor, q_ensemble

OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
ACT = gym.spaces.Box(-2, 2, (1,), np.float32)
SMALL = {"fcnet_hiddens": [32, 32]}
N = 256
# Cal-QL's defaults as CQL options: the same algorithm without the calibrated bound.
AS_CQL = {"actor_lr": 1e-4, "critic_lr": 3e-4, "alpha_lr": 1e-4, "min_q_weight": 5.0,
          "lagrangian": True, "lagrangian_thresh": 50.0}


def one_step_batch(returns_to_go=10.0):
    """One-step episodes (terminated) with reward 10 and data actions in [1.5, 1.9]."""
    rng = np.random.default_rng(0)
    return {"obs": rng.uniform(-1, 1, (N, 3)).astype(np.float32),
            "new_obs": rng.uniform(-1, 1, (N, 3)).astype(np.float32),
            "actions": rng.uniform(1.5, 1.9, (N, 1)).astype(np.float32),
            "rewards": np.full(N, 10.0, np.float32), "terminateds": np.ones(N, bool),
            "returns_to_go": np.full(N, returns_to_go, np.float32),
            "loss_mask": np.ones(N, np.float32)}


def test_d3rlpy_defaults_under_cqls_names():
    c = CalQLConfig()
    assert (c.actor_lr, c.critic_lr, c.alpha_lr, c.min_q_weight, c.num_actions) == (
        1e-4, 3e-4, 1e-4, 5.0, 10)
    assert (c.lagrangian, c.lagrangian_thresh, c.deterministic_backup, c.bc_iters) == (
        True, 50.0, True, 0)
    assert (c.train_batch_size_per_learner, c.tau, c.twin_q, c.algo_name) == (256, 0.005, True,
                                                                             "cal_ql")
    spec = spec_of(c, OBS, ACT)
    assert "returns_to_go" in spec.data.columns


@pytest.mark.parametrize("change, spaces, message", [
    *box_refusals("CalQLConfig"),
])
def test_what_it_cannot_do_is_a_one_line_config_error(change, spaces, message):
    assert_one_line_config_error(CalQLConfig(), change, spaces, message)


def test_the_bound_changes_the_loss_only_where_it_is_above_q():
    """With a return to go far below every Q the critic loss is CQL's to the bit; far above,
    the CQL term is larger (the policy's values are lifted to the bound)."""
    keys = jax.random.split(jax.random.PRNGKey(0), N)

    def critic(config, rtg):
        spec = spec_of(config.rl_module(model_config=SMALL), OBS, ACT)
        params = jax.device_get(init_state(spec.learning, 0).params)
        loss = next(x for x in spec.learning.losses if x.name == "qf")
        return loss.fn(params, one_step_batch(rtg), keys, BatchAxis())

    cql_loss, cql_metrics = critic(CQLConfig().training(**AS_CQL), 0.0)
    low_loss, low_metrics = critic(CalQLConfig(), -1e4)
    assert max_diff((cql_loss, cql_metrics), (low_loss, low_metrics)) == 0.0
    _, high_metrics = critic(CalQLConfig(), 1e3)
    assert np.all(np.asarray(high_metrics["cql_loss"]) > np.asarray(cql_metrics["cql_loss"]))


@pytest.mark.slow
def test_policy_values_stay_up_where_cql_pushes_them_down():
    """One-step data (reward 10, actions near 1.7) and a policy held still away from the data
    (actor_lr 1e-7), the CQL weight fixed at 5: after 1,000 updates CQL's Q at the policy's
    action keeps falling (measured 2.5 after 300 updates, -2.3 after 1,000), Cal-QL's, held
    by the bound at the data's return, does not (3.8, then 4.4). Without the bound the two
    runs are the same one."""
    training = {"actor_lr": 1e-7, "critic_lr": 1e-3, "lagrangian": False}
    batch = one_step_batch()
    values = {}
    for name, config in (("cal_ql", CalQLConfig()), ("cql", CQLConfig().training(**AS_CQL))):
        config = config.training(**training).rl_module(model_config=SMALL)
        q = q_ensemble(sp.to_spec(OBS), sp.to_spec(ACT), config.model_config, True)
        policy = actor(sp.to_spec(OBS), sp.to_spec(ACT), config.model_config)
        state, _ = run_updates(spec_of(config, OBS, ACT), batch, 1000)
        greedy = policy.dist.greedy(policy.apply(state.params["policy"], batch["obs"]))
        values[name] = float(np.mean(np.min(q.apply(state.params["q"], batch["obs"], greedy),
                                            axis=0)))
    assert values["cal_ql"] > values["cql"] + 3.0, values


def test_online_fine_tuning_starts_sac_from_a_cal_ql_checkpoint(tmp_path):
    offline = (CalQLConfig().environment("Pendulum-v1").rl_module(model_config={
        "fcnet_hiddens": [16, 16]}).learners(num_devices=1).debugging(seed=3).build())
    path = offline.save(str(tmp_path / "cal_ql"))
    want = jax.device_get(offline.state.params)
    offline.stop()
    sac = (SACConfig().environment("Pendulum-v1").training(init_from=path)
           .learners(num_devices=1).build())
    got = jax.device_get(sac.state.params)
    for net in ("policy", "q", "target_q", "log_alpha"):
        assert max_diff(want[net], got[net]) == 0, net
    assert sac.started_from == path
    sac.stop()
