"""Start-up work on background threads (`rljax_offline.runtime.background`): the init program that
`build()` leaves compiling while the data is read, and the acting step compiled while the
first updates run. Their errors reach the user where the work is used, and no thread
outlives them."""

import threading

import gymnasium as gym
import jax
import numpy as np
import pytest
from conftest import FIXTURES

from rljax_offline import BCConfig
from rljax_offline.acting.actor import ActorPolicy
from rljax_offline.learning import init
from rljax_offline.runtime.background import THREAD_NAME, Background


def _threads_left() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == THREAD_NAME]


def _config():
    return (BCConfig().environment("CartPole-v1")
            .offline_data(input_=str(FIXTURES / "episodes"))
            .training(train_batch_size_per_learner=64, num_updates_per_iteration=2)
            .evaluation(evaluation_interval=0, evaluation_num_envs=2)
            .learners(num_devices=1, compilation_cache_dir=None))


def test_background_returns_the_value_and_ends_its_thread():
    started = threading.Event()

    def work(a, b):
        started.set()
        return a + b

    job = Background(work, 2, 3)
    assert job.result() == 5 and started.is_set() and job.done
    assert _threads_left() == []


def test_background_raises_the_worker_error_each_time_it_is_asked():
    def fail():
        raise KeyError("missing column 'obs'")

    job = Background(fail)
    for _ in range(2):
        with pytest.raises(KeyError, match="missing column"):
            job.result()
    assert job.done and _threads_left() == []


def test_the_state_initialised_in_the_background_is_the_synchronous_one():
    algo = _config().build()
    expected = init.init_state(algo.spec.learning, algo.config.seed)
    got = algo.state  # waits for the background init
    for a, b in zip(*(map(np.asarray, jax.tree_util.tree_leaves(s.params))
                      for s in (got, expected))):
        np.testing.assert_array_equal(a, b)
    assert _threads_left() == []


def test_a_mistake_in_the_learners_init_still_raises_in_build(monkeypatch):
    make = BCConfig.make_spec

    def broken_init(self, obs_spec, act_spec):
        def init(rng):
            raise ValueError("hidden layer sizes must be positive")

        spec = make(self, obs_spec, act_spec)
        return spec._replace(learning=spec.learning._replace(init=init))

    monkeypatch.setattr(BCConfig, "make_spec", broken_init)
    with pytest.raises(ValueError, match="hidden layer sizes must be positive"):
        _config().build()  # traced on the caller's thread: no deferred surprise
    assert _threads_left() == []


def test_an_init_program_that_fails_in_the_background_raises_when_the_state_is_used(
        monkeypatch):
    # A compile option XLA does not know: the compile on the background thread fails.
    monkeypatch.setattr(init, "_INIT_COMPILER_OPTIONS", {"xla_no_such_option_h15": True})
    algo = _config().build()  # traced and lowered fine: build returns
    for use in (lambda: algo.state, algo.train):
        with pytest.raises(Exception, match="xla_no_such_option_h15"):
            use()
    assert _threads_left() == []


def test_the_first_train_leaves_the_evaluation_actor_compiled():
    algo = _config().build()
    algo.train()
    assert isinstance(algo._actor, ActorPolicy) and _threads_left() == []
    assert algo.evaluate(2)["num_episodes"] == 2


@pytest.mark.parametrize("where", ["compiling the step (background)",
                                   "shaping the observations (main thread)"])
def test_a_failure_preparing_acting_never_fails_train_and_evaluate_acts_as_before(
        monkeypatch, where):
    def broken(*args, **kwargs):
        raise RuntimeError("acting cannot be prepared")

    if where.startswith("compiling"):
        monkeypatch.setattr(ActorPolicy, "compile", broken)
    else:
        monkeypatch.setattr(gym.vector.utils, "create_empty_array", broken)
    algo = _config().build()
    result = algo.train()
    assert result["training_iteration"] == 1 and algo._actor is None
    assert _threads_left() == []
    monkeypatch.undo()  # acting itself works: only its preparation failed
    assert np.isfinite(algo.evaluate(2)["episode_return_mean"])
