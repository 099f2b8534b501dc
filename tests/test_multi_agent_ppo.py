"""IPPO with parameter sharing: `PPOConfig().multi_agent()` samples whole multi-agent
episodes and trains single-agent PPO's learner on every agent's episode.

* on a 3-agent task (reward 1 when an agent's action is the step's parity; random: 12 a team
  episode, best: 24) the team return climbs from random to near the best;
* the train batch counts env steps (every agent's steps) or agent steps (`count_steps_by`);
* evaluation reports the team return; a checkpoint restores as multi-agent PPO;
* several modules are `MultiModulePPO`'s (not this class's); fine-tuning from offline data
  is a one-line named error.
"""

import gymnasium as gym
import numpy as np
import pytest

from rljax_offline import PPOConfig
from rljax_offline.algorithms.ppo.multi_agent import MultiAgentPPO
from rljax_offline.errors import ConfigError


class ParityEnv:
    """3 agents observe `[t % 2, own index / 3]` and get 1 for the action `t % 2`; 8 steps."""

    possible_agents = ("a", "b", "c")

    def __init__(self, config=None):
        self.t, self.agents = 0, list(self.possible_agents)

    def observation_space(self, agent):
        return gym.spaces.Box(0.0, 1.0, (2,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(2)

    def _obs(self):
        return {a: np.array([self.t % 2, i / 3], np.float32) for i, a in enumerate(self.agents)}

    def reset(self, seed=None, options=None):
        self.t, self.agents = 0, list(self.possible_agents)
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        rewards = {a: float(actions[a] == self.t % 2) for a in actions}
        self.t += 1
        obs = self._obs()
        done = self.t >= 8
        if done:
            self.agents = []
        return obs, rewards, dict.fromkeys(obs, False), dict.fromkeys(obs, done), {}


def _config(**multi_agent):
    return (PPOConfig().environment(lambda cfg: ParityEnv()).multi_agent(**multi_agent)
            .env_runners(num_envs_per_env_runner=4)
            .training(lr=3e-3, train_batch_size_per_learner=64, minibatch_size=64,
                      num_epochs=8, entropy_coeff=0.0, use_kl_loss=False)
            .rl_module(model_config={"fcnet_hiddens": [32]})
            .evaluation(evaluation_interval=0, evaluation_duration=4, evaluation_num_envs=4))


def test_ippo_learns_a_shared_policy_and_reports_the_team_return(tmp_path):
    algo = _config().build()
    assert isinstance(algo, MultiAgentPPO)
    first = algo.train()
    assert first["learners"]["default_policy"]["num_module_steps_trained"] == 8 * 192
    assert first["env_runners"]["num_env_steps_sampled"] == 64  # 8 episodes x 8 env steps
    for _ in range(14):
        last = algo.train()
    assert first["env_runners"]["episode_return_mean"] < 17  # random: 12
    evaluation = algo.evaluate()
    assert evaluation["episode_return_mean"] >= 22  # the best is 24
    assert set(evaluation["agent_episode_returns_mean"]) == {"a", "b", "c"}
    assert last["env_runners"]["episode_return_mean"] > first["env_runners"][
        "episode_return_mean"]
    algo.save(str(tmp_path / "ckpt"))
    again = MultiAgentPPO.from_checkpoint(str(tmp_path / "ckpt"), _config())
    assert isinstance(again, MultiAgentPPO) and again.iteration == 15


def test_agent_steps_count_rows():
    algo = _config(count_steps_by="agent_steps").build()
    assert algo.rollout_rows == 64
    assert _config().build().rollout_rows == 192


def test_what_multi_agent_ppo_does_not_do_is_a_named_error():
    with pytest.raises(ConfigError, match="one module every agent shares"):
        MultiAgentPPO(_config(policies={"a", "b", "c"}, policy_mapping_fn=lambda a, e: a))
    with pytest.raises(ConfigError, match="samples its own rollouts"):
        _config().offline_data(input_="somewhere").build()
    with pytest.raises(ConfigError, match="records whole multi-agent episodes"):
        _config().offline_data(output="somewhere", output_write_episodes=False).build()


def test_output_records_sampled_and_evaluation_episodes_as_multi_agent_data(tmp_path):
    """`offline_data(output=...)` on IPPO writes every whole multi-agent episode it samples
    and evaluates, readable as multi-agent data: `save()` finishes the open file, `stop()`
    the rest; the sampled returns are the ones the iteration reported."""
    from rljax_offline.data.multi_agent_io import read_multi_agent_episodes

    out = tmp_path / "rec"
    algo = (_config().offline_data(output=str(out), output_max_rows_per_file=5)
            .evaluation(evaluation_duration=3).build())
    result = algo.train()                      # 8 episodes of 8 env steps
    algo.evaluate()
    algo.save(str(tmp_path / "ckpt"))          # the open pairs finish here
    sampled = read_multi_agent_episodes(str(out / "sampled"))
    assert len(sampled) == 8 and all(ep.is_done and ep.env_steps() == 8 for ep in sampled)
    assert all(set(ep.agent_ids) == set("abc") for ep in sampled)
    assert np.mean([ep.get_return() for ep in sampled]) == pytest.approx(
        result["env_runners"]["episode_return_mean"])
    assert len(read_multi_agent_episodes(str(out / "evaluation"))) == 3
    assert len(list((out / "sampled" / "agents").glob("*.parquet"))) == 2   # 5 + 3
    algo.train()
    algo.stop()
    assert len(read_multi_agent_episodes(str(out / "sampled"))) == 16
