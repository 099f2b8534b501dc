"""Behaviour policies for mixed-quality recordings: perturbation statistics, specs, tagging."""

import gymnasium as gym
import numpy as np
import pytest

from rljax_offline.acting.behavior import (
    Behavior,
    BehaviorError,
    BehaviorPolicy,
    parse_behavior,
    parse_mix,
)
from rljax_offline.acting.env_runner import record_expert
from rljax_offline.acting.experts import cartpole_expert, pendulum_expert
from rljax_offline.data import read_episodes

N = 20_000


def binomial_tolerance(p, n=N):
    """Six standard deviations of a frequency estimated from n draws."""
    return 6 * np.sqrt(p * (1 - p) / n)


def test_flips_replace_the_action_by_another_one():
    space = gym.spaces.Discrete(3, start=1)
    base = np.random.default_rng(0).integers(1, 4, N)
    out, changed = Behavior(flip_prob=0.3).perturb(base, space, np.random.default_rng(1))
    assert set(np.unique(out)) == {1, 2, 3}
    np.testing.assert_array_equal(changed, out != base)  # a flip never returns the same action
    assert abs(changed.mean() - 0.3) < binomial_tolerance(0.3)
    # The replacement is uniform over the two other actions.
    flipped = out[changed == 1] - base[changed == 1]
    assert abs(np.mean(flipped % 3 == 1) - 0.5) < binomial_tolerance(0.5, len(flipped))


def test_epsilon_draws_uniformly_from_all_actions():
    space = gym.spaces.Discrete(2)
    base = np.zeros(N, np.int64)
    out, changed = Behavior(epsilon=0.4).perturb(base, space, np.random.default_rng(2))
    # Half of the random draws land on the base action itself (RLlib's epsilon-greedy).
    assert abs(changed.mean() - 0.2) < binomial_tolerance(0.2)


def test_gaussian_noise_is_clipped_to_the_bounds():
    space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    base = np.full((N, 1), 1.5, np.float32)
    out, changed = Behavior(action_noise=0.5).perturb(base, space, np.random.default_rng(3))
    assert out.dtype == np.float32 and out.shape == base.shape
    assert out.max() == 2.0 and out.min() >= -2.0
    # P(noise > 0.5) = P(z > 1) ~ 0.1587 of the rows sit on the upper bound.
    assert abs(np.mean(out == 2.0) - 0.1587) < binomial_tolerance(0.1587)
    inside = out[out < 2.0]
    assert abs(np.std(np.clip(base[0, 0] + 0.5 * np.random.default_rng(4).normal(size=N),
                              -2, 2)) - np.std(out)) < 0.02
    assert changed.mean() == 1.0 and inside.min() < 0.5


def test_random_ignores_the_base_policy():
    space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    out, _ = Behavior(random=True).perturb(np.zeros((N, 1), np.float32), space,
                                           np.random.default_rng(5))
    assert abs(out.mean()) < 6 * 4 / np.sqrt(12 * N) and out.min() >= -2 and out.max() <= 2


def test_specs_parse_and_round_trip():
    b = parse_behavior("flip0.2+eps0.1")
    assert b == Behavior(flip_prob=0.2, epsilon=0.1)
    assert parse_behavior(b.name) == b
    assert parse_behavior("expert") == Behavior() and Behavior().name == "expert"
    mix = parse_mix("expert:1,random:3")
    assert [(m.name, w) for m, w in mix] == [("expert", 0.25), ("random", 0.75)]
    assert parse_mix("noise0.5")[0] == (Behavior(action_noise=0.5), 1.0)


@pytest.mark.parametrize("spec, message", [
    ("eps", "bad behaviour 'eps'"), ("flip1.5", "probability"), ("expert0.3", "bad behaviour"),
    ("random+eps0.1", "cannot be combined"), ("eps0.1+eps0.2", "given twice"),
    ("expert:x", "bad weight"), ("expert:0", "must be > 0"), ("", "empty"),
])
def test_bad_specs_are_named_errors(spec, message):
    with pytest.raises(BehaviorError, match=message):
        parse_mix(spec)


def test_behaviour_must_fit_the_action_space():
    with pytest.raises(BehaviorError, match="flips need a Discrete"):
        BehaviorPolicy(pendulum_expert, Behavior(flip_prob=0.1),
                       gym.spaces.Box(-2, 2, (1,), np.float32))
    with pytest.raises(BehaviorError, match="noise needs a Box"):
        record_expert("CartPole-v1", "/nonexistent", action_noise=0.1, num_episodes=1)
    with pytest.raises(BehaviorError, match="not both"):
        record_expert("CartPole-v1", "/nonexistent", epsilon=0.1, mix="expert", num_episodes=1)


def test_a_mix_tags_every_episode_and_is_reproducible(tmp_path):
    mix = "expert:0.3,flip0.7:0.7"
    record_expert("CartPole-v1", tmp_path / "a", num_episodes=40, mix=mix, seed=3,
                  progress=False)
    record_expert("CartPole-v1", tmp_path / "b", num_episodes=40, mix=mix, seed=3,
                  progress=False)
    eps = read_episodes(str(tmp_path / "a"))
    again = read_episodes(str(tmp_path / "b"))
    assert [e.custom_data["behavior"] for e in eps] == [e.custom_data["behavior"] for e in again]
    assert [len(e) for e in eps] == [len(e) for e in again]
    names = [e.custom_data["behavior"] for e in eps]
    assert set(names) == {"expert", "flip0.7"}
    for ep in eps:
        perturbed = ep.extra_model_outputs["action_perturbed"]
        expert_actions = cartpole_expert(ep.observations[:-1])
        # The flag says exactly where the recorded action is not the expert's.
        np.testing.assert_array_equal(perturbed, ep.actions != expert_actions)
        if ep.custom_data["behavior"] == "expert":
            assert not perturbed.any() and ep.get_return() == 500
        else:
            assert ep.get_return() < 100


def test_tabular_rows_keep_the_per_step_flag(tmp_path):
    record_expert("Pendulum-v1", tmp_path, num_episodes=2, action_noise=0.5, progress=False,
                  output_write_episodes=False)
    eps = read_episodes(str(tmp_path), input_read_episodes=False)
    for ep in eps:
        flag = ep.extra_model_outputs["action_perturbed"]
        expert_actions = pendulum_expert(ep.observations[:-1])
        np.testing.assert_array_equal(flag.astype(bool),
                                      np.any(ep.actions != expert_actions, axis=1))
        assert flag.mean() > 0.5


def test_plain_expert_recording_is_unchanged(tmp_path):
    record_expert("CartPole-v1", tmp_path, num_episodes=2, progress=False)
    for ep in read_episodes(str(tmp_path)):
        assert "action_perturbed" not in ep.extra_model_outputs and not ep.custom_data


@pytest.mark.parametrize("behavior", [Behavior(flip_prob=0.3, epsilon=0.2), Behavior(),
                                      Behavior(random=True), Behavior(flip_prob=0.5)])
def test_recorded_action_logp_is_the_behaviours_probability(behavior):
    """Off-policy evaluation divides by it: exp(action_logp) of every action sums to 1 over
    the actions, and matches the frequency at which the behaviour takes it."""
    space = gym.spaces.Discrete(3)
    base = np.ones(N, np.int64)
    out, _ = behavior.perturb(base, space, np.random.default_rng(0))
    probs = [np.exp(behavior.logp(base[:1], np.asarray([a]), space))[0] for a in range(3)]
    assert sum(probs) == pytest.approx(1.0)
    for a in range(3):
        assert abs(np.mean(out == a) - probs[a]) < binomial_tolerance(probs[a]) + 1e-12
    logp = behavior.logp(base, out, space)
    np.testing.assert_allclose(np.exp(logp), np.take(probs, out))


def test_box_action_logp_uniform_density_and_point_mass():
    space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    base = np.zeros((4, 1), np.float32)
    actions = np.float32([[0.0], [1.0], [-2.0], [0.5]])
    np.testing.assert_allclose(Behavior(random=True).logp(base, actions, space), np.log(0.25))
    assert list(Behavior().logp(base, actions, space)) == [np.inf, -np.inf, -np.inf, -np.inf]
    noisy = Behavior(action_noise=1.0).logp(base, actions, space)
    assert noisy[0] == pytest.approx(-0.5 * np.log(2 * np.pi))  # the Gaussian density
    assert noisy[2] == pytest.approx(np.log(0.0227501), rel=1e-4)  # the mass at the bound


def test_a_mix_records_action_logp(tmp_path):
    record_expert("CartPole-v1", tmp_path, num_episodes=6, mix="expert:0.5,flip0.7:0.5",
                  seed=1, progress=False)
    for ep in read_episodes(str(tmp_path)):
        logp = ep.extra_model_outputs["action_logp"]
        perturbed = ep.extra_model_outputs["action_perturbed"].astype(bool)
        if ep.custom_data["behavior"] == "expert":
            np.testing.assert_array_equal(logp, 0.0)
        else:
            np.testing.assert_allclose(logp, np.where(perturbed, np.log(0.7), np.log(0.3)),
                                       rtol=1e-6)
