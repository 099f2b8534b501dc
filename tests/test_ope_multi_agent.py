"""Team off-policy evaluation (`ope.multi_agent`): multi-agent episodes as team episodes whose
action is the joint action, judged by the team return.

* a team episode is the agents' steps side by side: observations concatenated, the joint
  action's mixed-radix index (Discrete) or the actions concatenated (Box), the team reward,
  the behaviour logp summed;
* the team target's probabilities are the product of the agents' (rows sum to 1);
* the behaviour policy itself as the target: every importance weight is 1, so IS-type
  estimates equal the data's own return;
* agents that skip env steps are a named error.
"""

import gymnasium as gym
import numpy as np
import pytest

from rljax_offline.acting.multi_agent_runner import MultiAgentEnvRunner, random_policy
from rljax_offline.envs.async_agents import AsyncAgentsEnv
from rljax_offline.errors import OPEError
from rljax_offline.ope.multi_agent import estimate_team, team_episodes, team_spaces, team_target


class ThreeAgentsEnv:
    """3 agents, Box(2) observations, 3 actions each (or Box(2) actions), 8 steps; reward 1
    for an agent whose action index (or first action coordinate > 0) matches step parity."""

    possible_agents = ("a", "b", "c")

    def __init__(self, continuous=False):
        self.continuous = continuous
        self.t, self.agents = 0, list(self.possible_agents)

    def observation_space(self, agent):
        return gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def action_space(self, agent):
        return (gym.spaces.Box(-1.0, 1.0, (2,), np.float32) if self.continuous
                else gym.spaces.Discrete(3))

    def _obs(self):
        return {a: np.array([self.t / 8, i / 3], np.float32) for i, a in enumerate(self.agents)}

    def reset(self, seed=None, options=None):
        self.t, self.agents = 0, list(self.possible_agents)
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        def hit(x):
            return (x[0] > 0) if self.continuous else (x == self.t % 2)
        rewards = {a: float(hit(actions[a])) for a in actions}
        self.t += 1
        obs = self._obs()
        done = self.t >= 8
        if done:
            self.agents = []
        return obs, rewards, dict.fromkeys(obs, False), dict.fromkeys(obs, done), {}


def _episodes(n=40, continuous=False):
    def env_fn():
        return ThreeAgentsEnv(continuous)
    runner = MultiAgentEnvRunner(env_fn, {"m": random_policy(env_fn().action_space("a"))},
                                 agent_to_module_mapping_fn=lambda a, e: "m", num_envs=4)
    return runner.sample(n)


def test_team_episodes_put_the_agents_side_by_side():
    eps = _episodes(4)
    spaces = team_spaces(eps)
    assert spaces.agents == ("a", "b", "c") and spaces.action_space.n == 27
    team = team_episodes(eps, spaces)
    for ma, ep in zip(eps, team):
        parts = [ma.agent_episodes[a] for a in spaces.agents]
        assert len(ep) == 8
        np.testing.assert_array_equal(
            ep.get_observations(slice(0, 9)),
            np.concatenate([p.get_observations(slice(0, 9)) for p in parts], axis=1))
        a, b, c = (np.asarray(p.get_actions()) for p in parts)
        np.testing.assert_array_equal(ep.get_actions(), a * 9 + b * 3 + c)
        np.testing.assert_allclose(ep.get_rewards(), sum(p.get_rewards() for p in parts))
        np.testing.assert_allclose(ep.get_extra_model_outputs("action_logp"),
                                   np.full(8, 3 * np.log(1 / 3)), rtol=1e-6)


def test_box_agents_give_the_concatenated_action():
    eps = _episodes(2, continuous=True)
    spaces = team_spaces(eps)
    team = team_episodes(eps, spaces)
    assert spaces.action_space.shape == (6,)
    np.testing.assert_array_equal(team[0].get_actions()[:, 2:4],
                                  eps[0].agent_episodes["b"].get_actions())


def test_the_team_target_is_the_product_of_the_agents():
    spaces = team_spaces(_episodes(1))
    rng = np.random.default_rng(0)
    tables = {a: rng.dirichlet(np.ones(3), size=5) for a in spaces.agents}
    fns = {a: (lambda obs, t=t: t[:len(obs)]) for a, t in tables.items()}
    probs = team_target(fns, spaces)(np.zeros((5, 6), np.float32))
    assert probs.shape == (5, 27)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0)
    want = np.einsum("ni,nj,nk->nijk", tables["a"], tables["b"], tables["c"]).reshape(5, 27)
    np.testing.assert_allclose(probs, want)


def test_the_behaviour_policy_as_target_estimates_the_datas_own_return():
    eps = _episodes(40)
    uniform = {a: (lambda obs: np.full((len(obs), 3), 1 / 3)) for a in ("a", "b", "c")}
    results = estimate_team(uniform, eps, ["is", "wis", "pdis", "wpdis"], gamma=1.0,
                            num_bootstrap=10)
    truth = np.mean([ep.get_return() for ep in eps])
    for name, r in results.items():
        assert r["v_behavior"] == pytest.approx(truth, rel=1e-5)
        assert r["v_target"] == pytest.approx(truth, rel=1e-5), name  # weights all 1


def test_agents_that_skip_env_steps_are_a_named_error():
    runner = MultiAgentEnvRunner(AsyncAgentsEnv, {"m": random_policy(gym.spaces.Discrete(2))},
                                 agent_to_module_mapping_fn=lambda a, e: "m")
    eps = runner.sample(1)
    with pytest.raises(OPEError, match="team OPE needs every agent at every env step"):
        team_episodes(eps, team_spaces(eps, ("fast", "slow", "late")))
    with pytest.raises(OPEError, match=r"no target policy for agents \['c'\]"):
        team_target({"a": None, "b": None}, team_spaces(_episodes(1)))
