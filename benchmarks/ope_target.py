"""Benchmark: what an off-policy evaluation during training costs to set up, the target policy
built from the current params and its log-probabilities of the held-out rows, evaluation after
evaluation of one run:

* ours: `ope.evaluation.policy_target` (`ope.target.from_acting`: compiled functions that
  take the params as an argument, shared by every evaluation of the run);
* reference: the same log-probabilities from a function compiled with the params closed over,
  as `from_acting` did before: every new checkpoint is a new program to compile.

BC on CartPole (a [256, 256] MLP), `--evaluations` train-then-evaluate rounds of 20 updates,
both ways timed in the same round. Printed: each round's milliseconds and the ratio of the
medians over the rounds after the first (the first compiles both ways).

    python benchmarks/ope_target.py [--rows 3000] [--evaluations 8]
"""

import argparse
import json
import time

import jax
import numpy as np
from _common import cartpole_recording

from rljax_offline import BCConfig
from rljax_offline.ope.evaluation import policy_target


def closed_over_logp(algo, obs, actions):
    """The reference: log-probabilities from a program with the params compiled in."""
    acting, params = algo.spec.acting, jax.device_get(algo.state.params)
    logp = jax.jit(lambda o, a: acting.dist.logp(acting.act(params, o), a))
    return np.asarray(logp(obs, actions))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=3000)
    ap.add_argument("--evaluations", type=int, default=8)
    args = ap.parse_args()
    algo = (BCConfig().environment("CartPole-v1").offline_data(input_=cartpole_recording(50))
            .training(num_updates_per_iteration=20).evaluation(evaluation_interval=0)).build()
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(args.rows, 4)).astype(np.float32)
    actions = rng.integers(0, 2, args.rows)
    ours, reference = [], []
    for _ in range(args.evaluations):
        algo.train()
        t = time.perf_counter()
        logp_ours = policy_target(algo.policy()).logp(obs, actions)
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        logp_ref = closed_over_logp(algo, obs, actions)
        reference.append(time.perf_counter() - t)
        np.testing.assert_allclose(logp_ours, logp_ref, rtol=1e-5, atol=1e-6)
    algo.stop()
    later = slice(1, None)
    print(json.dumps({
        "rows": args.rows, "ours_ms": [round(1e3 * x, 1) for x in ours],
        "reference_ms": [round(1e3 * x, 1) for x in reference],
        "median_after_first_ms": {"ours": round(1e3 * float(np.median(ours[later])), 1),
                                  "reference": round(1e3 * float(np.median(reference[later])), 1)},
        "reference_over_ours": round(float(np.median(reference[later]) / np.median(ours[later])),
                                     1)}))


if __name__ == "__main__":
    main()
