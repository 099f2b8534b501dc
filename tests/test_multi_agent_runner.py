"""MultiAgentEnvRunner: our asynchronous env (skips, hanging actions, early termination, a
late joiner), mpe2's simple_spread_v3 and simple_speaker_listener_v4 (optional extra), and
recording to the multi-agent Parquet format."""

from __future__ import annotations

import numpy as np
import pytest

from rljax_offline.acting.multi_agent_runner import MultiAgentEnvRunner, random_policy
from rljax_offline.connectors.multi_agent import module_spaces
from rljax_offline.data.multi_agent_io import read_multi_agent_episodes
from rljax_offline.envs.async_agents import AsyncAgentsEnv
from rljax_offline.episode.multi_agent_batch import module_batches
from rljax_offline.errors import ModuleSpaceMismatchError


def test_async_env_skips_hanging_actions_late_joiner_early_end(tmp_path):
    env = AsyncAgentsEnv()
    runner = MultiAgentEnvRunner(AsyncAgentsEnv,
                                 {"shared": random_policy(env.action_space("fast"))},
                                 agent_to_module_mapping_fn=lambda a, e: "shared", num_envs=2)
    eps = runner.sample(3)
    assert len(eps) == 3
    for ep in eps:
        assert len(ep) == 12 and ep.is_truncated and not ep.is_terminated
        m = ep.env_t_to_agent_t
        assert m["fast"] == tuple(range(8)) + ("S",) * 5
        assert m["slow"] == (0, "S", "S", 1, "S", "S", 2, "S", "S", 3, "S", "S", 4)
        assert m["late"] == ("S",) * 4 + tuple(range(9))
        assert ep.agent_episodes["fast"].is_terminated
        assert ep.agent_episodes["slow"].is_truncated and ep.agent_episodes["late"].is_truncated
        # every action is recorded with its logp
        for sa in ep.agent_episodes.values():
            assert len(sa.extra_model_outputs["action_logp"]) == len(sa)
            np.testing.assert_allclose(sa.extra_model_outputs["action_logp"], -np.log(2))
        # fast's action j is taken at env step j + 1: reward 1 when it matches its parity
        fast = ep.agent_episodes["fast"]
        np.testing.assert_array_equal(
            fast.rewards, (fast.actions == (np.arange(len(fast)) + 1) % 2).astype(float))
        gs = ep.custom_data["global_state"]
        assert gs.shape == (13, 2) and gs[-1, 0] == 1.0
    files = runner.record(str(tmp_path), 2)
    assert len(files) == 2
    back = read_multi_agent_episodes(str(tmp_path))
    assert [b.env_t_to_agent_t["slow"] for b in back] == [eps[0].env_t_to_agent_t["slow"]] * 2
    assert back[0].custom_data["global_state"].shape == (13, 2)


def test_mpe2_simple_spread_three_identical_agents_share_a_module(tmp_path):
    pytest.importorskip("mpe2")
    from mpe2 import simple_spread_v3

    def make():
        return simple_spread_v3.parallel_env(N=3, max_cycles=10, continuous_actions=False)

    policy = random_policy(make().action_space("agent_0"))
    runner = MultiAgentEnvRunner(make, {"spread": policy},
                                 agent_to_module_mapping_fn=lambda a, e: "spread", num_envs=2)
    eps = runner.sample(2)
    for ep in eps:
        assert len(ep) == 10 and ep.is_truncated and ep.agent_steps() == 30
        assert ep.custom_data["global_state"].shape == (11, 54)
    batches = module_batches(eps)
    assert batches["spread"].batch_size == 8 and int(batches["spread"].lengths.sum()) == 60


def test_mpe2_speaker_listener_two_modules_with_different_spaces(tmp_path):
    pytest.importorskip("mpe2")
    from mpe2 import simple_speaker_listener_v4

    def make():
        return simple_speaker_listener_v4.parallel_env(max_cycles=8, continuous_actions=True)

    env = make()
    mapping = {"speaker_0": "speaker", "listener_0": "listener"}
    with pytest.raises(ModuleSpaceMismatchError, match="speaker_0"):
        module_spaces({a: env.observation_space(a) for a in env.possible_agents},
                      {a: env.action_space(a) for a in env.possible_agents},
                      lambda a, e: "one")
    runner = MultiAgentEnvRunner(
        make, {m: random_policy(env.action_space(a)) for a, m in mapping.items()},
        agent_to_module_mapping_fn=mapping)
    files = runner.record(str(tmp_path), 2)
    back = read_multi_agent_episodes(str(tmp_path))
    assert len(files) == 2 and len(back) == 2
    for ep in back:
        assert {e.module_id for e in ep.agent_episodes.values()} == {"speaker", "listener"}
        assert ep.agent_episodes["speaker_0"].actions.shape == (8, 3)


def test_aec_env_goes_through_pettingzoos_conversion():
    pytest.importorskip("mpe2")
    from mpe2 import simple_spread_v3

    def make():
        return simple_spread_v3.env(N=2, max_cycles=5, continuous_actions=False)

    runner = MultiAgentEnvRunner(make, {"m": random_policy(make().action_space("agent_0"))},
                                 agent_to_module_mapping_fn=lambda a, e: "m")
    (ep,) = runner.sample(1)
    assert len(ep) == 5 and ep.agent_steps() == 10 and ep.is_truncated
