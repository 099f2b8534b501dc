"""`acting.evaluator.Evaluator`, the evaluation env runner the facade owns: its envs are kept
between evaluations, each iteration's evaluation is seeded from the run's seed (another
evaluator of the same run gives the same episodes for that iteration, another iteration
other ones), and it closes."""

import numpy as np

from rljax_offline.acting.evaluator import Evaluator
from rljax_offline.acting.experts import cartpole_expert
from rljax_offline.acting.protocol import CallableActor


def test_evaluations_are_seeded_per_iteration_and_the_envs_are_kept():
    def lengths(ev, iteration):
        actor = CallableActor(lambda obs: np.random.default_rng(0).integers(0, 2, len(obs)))
        return [len(ep) for ep in ev.sample(actor, 6, iteration)]

    ev, twin, other = (Evaluator("CartPole-v1", max_envs=2, seed=7) for _ in range(3))
    first = lengths(ev, 1)
    runner = ev._runner
    assert lengths(twin, 1) == first and lengths(other, 2) != first
    lengths(ev, 2)
    assert ev._runner is runner  # made once, kept
    twin.close()
    other.close()
    stats = ev.evaluate(CallableActor(cartpole_expert), 2, iteration=3)
    assert stats["num_episodes"] == 2 and stats["episode_return_mean"] > 400
    assert stats["evaluation_time_s"] > 0
    ev.close()
    assert ev._runner is None
    assert ev.evaluate(CallableActor(cartpole_expert), 1, iteration=0)["num_episodes"] == 1
    ev.close()
