"""MultiAgentEpisode: named errors of the builder, immutability, per-module batches under jit
(one compile for different agent sets), sample batches."""

from __future__ import annotations

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rljax_offline.episode.multi_agent_batch import module_batches
from rljax_offline.episode.multi_agent_builder import MultiAgentEpisodeBuilder
from rljax_offline.errors import (
    AgentNotInEnvError,
    AgentTruncatedWithoutObservationError,
    MultiAgentEpisodeError,
    ObservationOutsideSpaceError,
)

BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


def _builder(agents=("a", "b")):
    b = MultiAgentEpisodeBuilder("e", observation_space={a: BOX for a in agents},
                                 action_space={a: gym.spaces.Discrete(2) for a in agents},
                                 agent_to_module_mapping_fn=lambda a, ep: "shared")
    b.add_env_reset(observations={a: np.zeros(2, np.float32) for a in agents})
    return b


def test_truncated_without_final_observation_names_agent_and_step():
    b = _builder()
    b.add_env_step({"a": np.zeros(2, np.float32)}, {"a": 0, "b": 1}, {"a": 1.0})
    with pytest.raises(AgentTruncatedWithoutObservationError) as info:
        b.add_env_step({}, {"a": 1}, {"a": 0.0}, truncateds={"b": True})
    assert info.value.agent_id == "b" and info.value.env_step == 2
    assert "'b'" in str(info.value) and "env step 2" in str(info.value)


def test_action_for_unknown_agent_and_observation_outside_space():
    b = _builder()
    with pytest.raises(AgentNotInEnvError, match="'c'"):
        b.add_env_step({"a": np.zeros(2, np.float32)}, {"a": 0, "c": 1}, {"a": 1.0})
    with pytest.raises(ObservationOutsideSpaceError, match="agent 'a'"):
        b.add_env_step({"a": np.full(2, 5.0, np.float32)}, {"a": 0}, {"a": 1.0})


def test_step_without_reward_and_step_after_done_are_refused():
    b = _builder()
    with pytest.raises(MultiAgentEpisodeError, match="no reward"):
        b.add_env_step({"a": np.zeros(2, np.float32)}, {"a": 0}, {})
    b2 = _builder()
    b2.add_env_step({"a": np.zeros(2, np.float32), "b": np.zeros(2, np.float32)},
                    {"a": 0, "b": 0}, {"a": 1.0, "b": 1.0}, truncateds={"__all__": True})
    ep = b2.finalize()
    # RLlib 2.60 would report terminated (and __all__ truncation = is_terminated): we do not
    assert ep.is_truncated and not ep.is_terminated
    assert ep.get_truncateds() == {"a": True, "b": True, "__all__": True}
    assert ep.get_terminateds() == {"a": False, "b": False, "__all__": False}
    with pytest.raises(MultiAgentEpisodeError, match="done"):
        b2.add_env_step({}, {}, {})


def test_hanging_action_completes_and_episode_is_immutable():
    b = _builder()
    b.add_env_step({"a": np.zeros(2, np.float32)}, {"a": 0, "b": 1}, {"a": 1.0, "b": 0.5})
    ep = b.finalize()
    assert ep.env_t_to_agent_t["b"] == (0, "S")
    assert ep.hanging_actions_end == {"b": 1}
    assert ep.get_return() == 1.0 and ep.get_return(include_hanging_rewards=True) == 1.5
    with pytest.raises(AttributeError):
        ep.env_t = 3
    b.add_env_step({"b": np.ones(2, np.float32) * 0.5}, {"a": 1}, {"a": 0.0, "b": 0.25})
    ep2 = b.finalize()
    assert ep2.env_t_to_agent_t["b"] == (0, "S", 1)
    assert float(ep2.agent_episodes["b"].rewards[0]) == 0.75
    assert ep2.agent_steps() == 2 and ep2.env_steps() == 2
    assert ep.env_t == 1  # the earlier snapshot is unchanged


def test_setters_return_new_episodes():
    ep = _episode(("a", "b"), 3, 0)
    new = ep.set_rewards(new_data={"a": np.zeros(3)})
    assert float(np.sum(new.agent_episodes["a"].rewards)) == 0.0
    assert float(np.sum(ep.agent_episodes["a"].rewards)) != 0.0  # unchanged
    assert new.agent_episodes["b"] is ep.agent_episodes["b"]
    new = ep.set_observations(new_data={"b": np.ones(2, np.float32)}, at_indices=-1)
    np.testing.assert_array_equal(new.get_observations(-1, "b")["b"], np.ones(2))
    with pytest.raises(KeyError, match="'z'"):
        ep.set_actions(new_data={"z": np.zeros(3)})


def _episode(agents, steps, seed):
    rng = np.random.default_rng(seed)
    b = _builder(agents)
    for _ in range(steps):
        obs = {a: rng.uniform(-1, 1, 2).astype(np.float32) for a in agents}
        b.add_env_step(obs, {a: int(rng.integers(2)) for a in agents},
                       {a: float(rng.normal()) for a in agents})
    return b.finalize()


def test_module_batches_compile_once_for_different_agent_sets():
    traces = []

    @jax.jit
    def loss(batch):
        traces.append(1)
        return jnp.sum(batch.rewards * batch.mask)

    sets = [("a", "b"), ("a", "b", "c"), ("b",), ("c", "d", "a")]
    for i, agents in enumerate(sets):
        eps = [_episode(agents, 5 + i, i), _episode(agents, 3, 10 + i)]
        batches = module_batches(eps, rows=8)
        assert set(batches) == {"shared"}
        want = sum(float(np.sum(e.rewards)) for m in eps for e in m.agent_episodes.values())
        np.testing.assert_allclose(float(loss(batches["shared"])), want, rtol=1e-5)
    assert len(traces) == 1


def test_sample_batch_per_agent():
    ep = _episode(("a", "b"), 3, 0)
    sb = ep.get_sample_batch()
    assert sb["env_steps"] == 3 and set(sb["policy_batches"]) == {"a", "b"}
    a = sb["policy_batches"]["a"]
    assert a["obs"].shape == (3, 2) and a["new_obs"].shape == (3, 2)
    np.testing.assert_array_equal(a["new_obs"][:-1], a["obs"][1:])


def test_guide_code_blocks_run(capsys):
    """docs/guides/multi-agent-data.md: its Python blocks run in order and print what the
    comments say."""
    import os
    import re

    path = os.path.join(os.path.dirname(__file__), "..", "docs", "guides",
                        "multi-agent-data.md")
    with open(path) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    import importlib.util

    has_mpe2 = importlib.util.find_spec("mpe2") is not None
    ns: dict = {}
    for block in blocks:
        if "mpe2" in block and not has_mpe2:  # the [multiagent] extra
            continue
        exec(compile(block, path, "exec"), ns)
    out = capsys.readouterr().out
    for want in ("{'a': (0, 1, 'S'), 'b': (0, 'S', 1), 'c': ('S', 'S', 0)}", "2.0 2.25",
                 "3 (0, 1, 'S', 2)", "{'shared': (8, 8)}", "b 2", "(4, 5)", "[2.]", "[1, 1, 2]",
                 "(0, 'S', 'S', 1, 'S', 'S', 2, 'S', 'S', 3, 'S', 'S', 4)",
                 "(8,)", "[3. 2. 2.]", "[('ep0', 'a'), ('ep0', 'c')] (2, 8)",
                 *(["[75, 75]"] if has_mpe2 else [])):
        assert want in out


@pytest.mark.parametrize("space", [gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
                                   gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
                                   gym.spaces.Box(0, 5, (2,), np.int64)])
def test_box_observation_check_agrees_with_gymnasium(space):
    import warnings

    from rljax_offline.episode.multi_agent_builder import _in_box

    values = [np.zeros(2, np.float32), np.full(2, 3.0, np.float32),
              np.full(2, np.nan, np.float32), np.zeros(3, np.float32), np.zeros(2, np.float64),
              np.ones(2, np.int64), np.full(2, -2, np.int32), [0.5, 0.5], "text"]
    for v in values:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # gymnasium warns when it casts a list
                want = bool(space.contains(v))
        except Exception:  # noqa: BLE001
            want = False
        assert _in_box(v, space, {}) == want, (space, v)


def test_multi_agent_episode_is_a_pytree():
    ep = _episode(("a", "b"), 3, 0)
    on_device = jax.device_put(ep)
    assert type(on_device) is type(ep) and on_device.env_t_to_agent_t == ep.env_t_to_agent_t
    assert isinstance(on_device.agent_episodes["a"].rewards, jax.Array)
    doubled = jax.tree_util.tree_map(lambda x: x * 2, ep)
    np.testing.assert_allclose(doubled.agent_episodes["b"].rewards,
                               2 * ep.agent_episodes["b"].rewards)
    np.testing.assert_array_equal(doubled.get_observations(-1)["a"],
                                  2 * ep.get_observations(-1)["a"])
    total = jax.jit(lambda e: sum(x.rewards.sum() for x in e.agent_episodes.values()))
    np.testing.assert_allclose(float(total(ep)), ep.get_return(), rtol=1e-5)
