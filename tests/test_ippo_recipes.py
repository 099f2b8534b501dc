"""The IPPO data-set recipes beyond simple_spread (`apps.multi_agent_ippo`): PPO's
`normalize_actions` (the clipped Gaussian in [-1, 1] units: exact log-probabilities of the
actions the env gets, inside the box), the checkpoint schedule that finds a fast learner's
medium checkpoint, and (slow) tiny IPPO runs with two modules (speaker-listener) and with
Box actions making every kind."""

from __future__ import annotations

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from rljax_offline import spaces as sp
from rljax_offline.apps.multi_agent_datasets import IPPO_ENVS, IPPO_KINDS, RECIPES, recipe
from rljax_offline.apps.training_loop import checkpointed_steps
from rljax_offline.models.distributions import clipped_gaussian

BOX = sp.to_spec(gym.spaces.Box(np.array([0.0, -2.0], np.float32),
                                np.array([1.0, 2.0], np.float32)))


def test_clipped_gaussian_logp_is_the_clipped_draws_probability():
    """Inside the bounds the env-unit Gaussian's density (mean mid + half * m, std
    half * s), on a bound the Gaussian's mass beyond it; draws are clipped into the box
    with those masses at the bounds, and density plus masses integrate to 1."""
    dist = clipped_gaussian(BOX)
    mid, half = np.array([0.5, 0.0]), np.array([0.5, 2.0])
    inputs = np.array([[0.3, -0.8, np.log(0.7), np.log(0.4)]], np.float32)
    mean, std = mid + half * inputs[0, :2], half * np.exp(inputs[0, 2:])
    acts = np.array([[0.2, 2.0], [0.0, -1.5], [1.0, -2.0]], np.float32)
    got = np.asarray(dist.logp(jnp.repeat(jnp.asarray(inputs), 3, 0), jnp.asarray(acts)))
    want = []
    for a in acts:
        per = [stats.norm.logcdf(lo, m, s) if x <= lo else stats.norm.logsf(hi, m, s)
               if x >= hi else stats.norm.logpdf(x, m, s)
               for x, m, s, lo, hi in zip(a, mean, std, (0.0, -2.0), (1.0, 2.0))]
        want.append(sum(per))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    draws = np.asarray(dist.sample(jnp.repeat(jnp.asarray(inputs), 200_000, 0),
                                   jax.random.PRNGKey(0)))
    assert draws.shape == (200_000, 2)
    assert np.all((draws >= BOX.low) & (draws <= BOX.high))
    np.testing.assert_allclose((draws[:, 0] == 0.0).mean(), stats.norm.cdf(0.0, mean[0],
                                                                           std[0]), atol=4e-3)
    np.testing.assert_allclose((draws[:, 1] == 2.0).mean(), stats.norm.sf(2.0, mean[1],
                                                                          std[1]), atol=4e-3)
    grid = np.linspace(1e-4, 1 - 1e-4, 4001, dtype=np.float32)
    pts = np.stack([grid, np.zeros_like(grid)], 1)
    rows = jnp.repeat(jnp.asarray(inputs), grid.size, 0)
    inner = np.exp(np.asarray(dist.logp(rows, jnp.asarray(pts)))) / stats.norm.pdf(
        0.0, mean[1], std[1])
    total = np.trapezoid(inner, grid) + stats.norm.cdf(0, mean[0], std[0]) + stats.norm.sf(
        1, mean[0], std[0])
    np.testing.assert_allclose(total, 1.0, atol=1e-3)
    np.testing.assert_allclose(np.asarray(dist.greedy(jnp.asarray(inputs)))[0],
                               np.clip(mean, BOX.low, BOX.high), rtol=1e-6)
    with pytest.raises(ValueError, match="bounded Box"):
        clipped_gaussian(sp.to_spec(gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)))


class _Counting:
    """An online algorithm's `train()` that samples `per_iteration` env steps."""

    def __init__(self, per_iteration):
        self.steps, self.per_iteration = 0, per_iteration

    def train(self):
        self.steps += self.per_iteration
        return {"num_env_steps_sampled_lifetime": self.steps}

    def save(self, path):
        return path


def test_dense_first_checkpoints_split_the_first_interval_only():
    plain = [s for s, _ in checkpointed_steps(_Counting(2000), "/x", 40_000, 4)]
    assert plain == [10_000, 20_000, 30_000, 40_000]
    dense = [s for s, _ in checkpointed_steps(_Counting(2000), "/x", 40_000, 4, 5)]
    assert dense == [2000, 4000, 6000, 8000, 10_000, 20_000, 30_000, 40_000]
    odd = [s for s, _ in checkpointed_steps(_Counting(3000), "/x", 40_000, 4, 5)]
    assert odd == [3000, 6000, 9000, 12_000, 21_000, 30_000, 42_000]


def test_ippo_recipes_cover_every_kind_of_each_ippo_env():
    assert set(IPPO_ENVS) >= {"simple_spread", "simple_spread_continuous",
                              "simple_speaker_listener"}
    for env in IPPO_ENVS:
        assert [recipe(f"mpe-{env}-ippo-{k}").kind for k in IPPO_KINDS] == list(IPPO_KINDS)
    assert sum(r.kind != "heuristic" for r in RECIPES.values()) == 4 * len(IPPO_ENVS)


def test_normalized_ppo_records_box_actions_with_their_log_probabilities():
    """Multi-agent PPO with `normalize_actions=True` on continuous simple_spread: the
    recorded actions are the env's (inside Box(0, 1)), a fresh policy acts around the box's
    centre, and the recorded `action_logp` is the policy's clipped-Gaussian log-probability
    of them (PPO's ratio starts at 1)."""
    pytest.importorskip("mpe2")
    from rljax_offline.algorithms.ppo import PPOConfig
    from rljax_offline.apps.multi_agent_datasets import ENVS

    spec = ENVS["simple_spread_continuous"]
    algo = (PPOConfig().environment(f"{spec.env_id}:parallel_env", env_config=dict(spec.kwargs))
            .multi_agent(policies={"spread"}, policy_mapping_fn=dict(spec.agent_to_module))
            .env_runners(num_envs_per_env_runner=2, normalize_actions=True)
            .training(train_batch_size_per_learner=64, minibatch_size=64)
            .debugging(seed=3).build())
    try:
        chunks, _ = algo.sample_steps(50)
        dist = algo.policy().module.dist
        assert dist.kind == "clipped_gaussian"
        for ep in chunks:
            a = np.asarray(ep.get_actions())
            assert a.shape == (25, 5) and a.min() >= 0.0 and a.max() <= 1.0
            outs = ep.extra_model_outputs
            np.testing.assert_allclose(
                np.asarray(dist.logp(jnp.asarray(outs["action_dist_inputs"]), jnp.asarray(a))),
                outs["action_logp"], rtol=1e-5, atol=1e-5)
        every = np.concatenate([np.asarray(ep.get_actions()) for ep in chunks])
        assert abs(every.mean() - 0.5) < 0.1 and 0.02 < (every == 0.0).mean() < 0.35
    finally:
        algo.stop()


def _tiny(tmp_path):
    return dict(num_steps=50, eval_episodes=4, env_steps=4000,
                cache_dir=str(tmp_path / "cache"))


@pytest.mark.slow
def test_two_module_ippo_sets_come_from_one_cached_run(tmp_path):
    """Speaker-listener: IPPO trains the `speaker` and `listener` modules (MultiModulePPO),
    its checkpoints are dense at the start, medium is no later than expert, the cache
    serves the second set, and every agent's recorded `action_logp` is its module's."""
    pytest.importorskip("mpe2")
    from rljax_offline.apps.multi_agent_ippo import module_policies
    from rljax_offline.apps.multi_agent_record import make_multi_agent_dataset
    from rljax_offline.data.multi_agent_io import read_multi_agent_episodes

    replay = make_multi_agent_dataset("mpe-simple_speaker_listener-ippo-medium-replay",
                                      str(tmp_path / "mr"), **_tiny(tmp_path))
    run = replay["ippo_run"]
    assert [e["env_steps"] for e in run["evaluations"]] == [2000, 4000]
    assert run["medium"]["env_steps"] <= run["expert"]["env_steps"]
    assert replay["num_episodes"] == run["medium"]["env_steps"] // 25
    runs = list((tmp_path / "cache").iterdir())
    expert = make_multi_agent_dataset("mpe-simple_speaker_listener-ippo-expert",
                                      str(tmp_path / "e"), **_tiny(tmp_path))
    assert list((tmp_path / "cache").iterdir()) == runs
    assert expert["module_ids"] == ["listener", "speaker"]
    assert expert["ref_max_score"] == run["expert"]["return_mean"]
    policies = module_policies(run["expert"]["checkpoint"])
    assert sorted(policies) == ["listener", "speaker"]
    ep = read_multi_agent_episodes(str(tmp_path / "e"))[0]
    for agent, n in (("speaker_0", 3), ("listener_0", 5)):
        sa = ep.agent_episodes[agent]
        logits = np.asarray(sa.extra_model_outputs["action_dist_inputs"])
        assert logits.shape[-1] == n
        want = jax.nn.log_softmax(logits)[np.arange(len(sa)), np.asarray(sa.get_actions())]
        np.testing.assert_allclose(sa.extra_model_outputs["action_logp"], want, atol=1e-5)


@pytest.mark.slow
def test_continuous_ippo_sets_hold_box_actions_and_their_log_probabilities(tmp_path):
    """simple_spread_continuous: medium-replay (IPPO's own rollouts) and expert hold actions
    inside Box(0, 1) with the checkpoint's clipped-Gaussian log-probability of them."""
    pytest.importorskip("mpe2")
    from rljax_offline.algorithms.algorithm import Algorithm
    from rljax_offline.apps.multi_agent_record import make_multi_agent_dataset
    from rljax_offline.data.multi_agent_io import read_multi_agent_episodes

    replay = make_multi_agent_dataset("mpe-simple_spread_continuous-ippo-medium-replay",
                                      str(tmp_path / "mr"), **_tiny(tmp_path))
    expert = make_multi_agent_dataset("mpe-simple_spread_continuous-ippo-expert",
                                      str(tmp_path / "e"), **_tiny(tmp_path))
    algo = Algorithm.from_checkpoint(expert["ippo_run"]["expert"]["checkpoint"])
    dist = algo.policy().module.dist
    algo.stop()
    assert dist.kind == "clipped_gaussian" and replay["num_episodes"] >= 80
    for folder in ("mr", "e"):
        for ep in read_multi_agent_episodes(str(tmp_path / folder))[:3]:
            for sa in ep.agent_episodes.values():
                a = np.asarray(sa.get_actions())
                assert a.shape == (25, 5) and a.min() >= 0.0 and a.max() <= 1.0
                outs = sa.extra_model_outputs
                np.testing.assert_allclose(
                    np.asarray(dist.logp(jnp.asarray(outs["action_dist_inputs"]),
                                         jnp.asarray(a))),
                    outs["action_logp"], rtol=1e-5, atol=1e-5)


def test_single_agent_ppo_normalizes_box_actions_too():
    """Single-agent PPO on Pendulum (Box(-2, 2)) with `normalize_actions=True`: the
    sampled actions are inside the bounds with the clipped Gaussian's log-probability,
    and one iteration trains with PPO's ratio starting at 1 (no clipped rows at first);
    fine-tuning a policy trained on the env's scale is refused."""
    from rljax_offline.algorithms.config import ConfigError
    from rljax_offline.algorithms.ppo import PPOConfig

    config = (PPOConfig().environment("Pendulum-v1")
              .env_runners(num_envs_per_env_runner=2, normalize_actions=True)
              .training(train_batch_size_per_learner=64, minibatch_size=64, num_epochs=1)
              .rl_module(model_config={"fcnet_hiddens": [16]}).learners(num_devices=1))
    algo = config.build()
    try:
        chunks, _ = algo.sample_steps(64)
        dist = algo.policy().module.dist
        for ep in chunks:
            a = np.asarray(ep.get_actions())
            assert a.min() >= -2.0 and a.max() <= 2.0
            outs = ep.extra_model_outputs
            np.testing.assert_allclose(
                np.asarray(dist.logp(jnp.asarray(outs["action_dist_inputs"]), jnp.asarray(a))),
                outs["action_logp"], rtol=1e-5, atol=1e-5)
        learner = algo.train()["learners"]["default_policy"]
        assert learner["clip_fraction"] == 0.0 and abs(learner["mean_kl_loss"]) < 1e-6
    finally:
        algo.stop()
    with pytest.raises(ConfigError, match="normalize_actions"):
        config.training(init_policy_from="/some/checkpoint").validate()
