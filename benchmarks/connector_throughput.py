"""Benchmark: the default learner pipeline with frame stacking (4) and the mean-std filter over
500 CartPole episodes (about 250k timesteps), jitted over length-bucketed `EpisodeBatch`es,
next to the same logic written per episode in Python and numpy (the way RLlib's learner
connectors run it), in the same run. Prints timesteps/s for both and the ratio (aim: >= 20x).

The filter has RLlib's per-step semantics (each observation normalized with the statistics as
of its own push); the numpy reference computes them per episode with prefix sums (vectorized,
a fairer baseline than RLlib's push-one-observation-at-a-time loop), and stacks frames with a
strided window view (no per-step Python).

    python benchmarks/connector_throughput.py
"""

import json
import os
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

from _common import cartpole_recording  # noqa: E402
from rljax_offline import EpisodeBatch  # noqa: E402
from rljax_offline.connectors import (Context, Spaces, default_learner, frame_stack,  # noqa: E402
                                      mean_std_filter)
from rljax_offline.data import read_episodes  # noqa: E402

K = 4


def per_episode_numpy(episodes):
    """RLlib-style: Python loop over episodes, numpy per episode; each stacked observation
    pushed in order and normalized with the statistics as of its push (prefix sums relative to
    the running mean, merged with the running statistics as Chan et al.)."""
    count, mean, m2 = 0, np.zeros(4 * K), np.zeros(4 * K)
    cols = {k: [] for k in ("obs", "new_obs", "actions", "rewards", "terminateds",
                            "truncateds", "loss_mask")}
    for ep in episodes:
        obs = ep.get_observations()
        T = len(ep)
        padded = np.concatenate([np.zeros((K - 1, 4), obs.dtype), obs])
        stacked = np.lib.stride_tricks.sliding_window_view(padded, K, axis=0)  # [T+1, 4, K]
        stacked = stacked.transpose(0, 2, 1).reshape(T + 1, 4 * K)
        y = stacked - mean
        n = np.arange(1, T + 2)[:, None]
        s, q = np.cumsum(y, 0), np.cumsum(y * y, 0)
        pmean, pm2 = s / n, q - s * s / n  # the episode's prefixes, relative to `mean`
        tot = count + n
        mean_t = mean + pmean * n / tot
        m2_t = m2 + pm2 + pmean**2 * count * n / tot
        std = np.where(tot > 1, np.sqrt(m2_t / np.maximum(tot - 1, 1)), np.abs(mean_t))
        normed = np.clip((stacked - mean_t) / (std + 1e-6), -10, 10)  # RLlib's RunningStat
        count, mean, m2 = int(tot[-1, 0]), mean_t[-1], m2_t[-1]
        cols["obs"].append(normed[:-1])
        cols["new_obs"].append(normed[1:])
        cols["actions"].append(ep.get_actions())
        cols["rewards"].append(ep.get_rewards())
        last = np.arange(T) == T - 1
        cols["terminateds"].append(last & ep.is_terminated)
        cols["truncateds"].append(last & ep.is_truncated)
        cols["loss_mask"].append(np.ones(T, bool))
    return {k: np.concatenate(v) for k, v in cols.items()}


def jitted(episodes, apply, state, batch_eps=250):
    eps = sorted(episodes, key=len)
    out = []
    for i in range(0, len(eps), batch_eps):
        b = EpisodeBatch.from_episodes(eps[i:i + batch_eps], pad_batch_to=batch_eps)
        _, batch, state = apply(state, b, {}, Context())
        out.append(batch)
    jax.block_until_ready(out)
    return out


def main():
    episodes = read_episodes(cartpole_recording(500, output_max_rows_per_file=100))
    steps = sum(len(e) for e in episodes)
    spaces = Spaces.of(episodes[0].observation_space, episodes[0].action_space)
    pipe = default_learner(spaces, frame_stack(K), mean_std_filter(as_learner_connector=True))
    apply = jax.jit(pipe.apply)
    state = pipe.init(spaces)
    t0 = time.perf_counter()
    jitted(episodes, apply, state)
    t_first = time.perf_counter() - t0
    t_jit = min(_time(lambda: jitted(episodes, apply, state)) for _ in range(3))
    t_np = min(_time(lambda: per_episode_numpy(episodes)) for _ in range(2))
    _check_same(episodes, apply, state)
    # The part inside jit alone (batches already built), the way a fused train step sees it.
    eps = sorted(episodes, key=len)
    batches = [jax.device_put(EpisodeBatch.from_episodes(eps[i:i + 250], pad_batch_to=250))
               for i in range(0, len(eps), 250)]
    t_inside = min(_time(lambda: jax.block_until_ready(
        [apply(state, b, {}, Context())[1] for b in batches])) for _ in range(3))
    print(json.dumps({
        "episodes": len(episodes), "timesteps": steps,
        "first_call_incl_compile_s": round(t_first, 2),
        "numpy_per_episode_ts_per_s": round(steps / t_np),
        "jitted_incl_batching_ts_per_s": round(steps / t_jit),
        "jitted_pipeline_only_ts_per_s": round(steps / t_inside),
        "ratio_incl_batching": round(t_np / t_jit, 1),
        "ratio_pipeline_only": round(t_np / t_inside, 1)}))


def _check_same(episodes, apply, state):
    """Both sides compute the same normalized observations (in the jitted batches' order)."""
    eps = sorted(episodes, key=len)
    ref = per_episode_numpy(eps)["obs"]
    got = np.concatenate([np.asarray(b["obs"])[np.asarray(b["loss_mask"])]
                          for b in jitted(eps, apply, state)])
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3)


def _time(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
