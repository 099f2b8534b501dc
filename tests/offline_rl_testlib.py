"""Shared helpers for the algorithms' tests: one update on a hand-made batch, the exact-resume
check through the registry, and the evaluation returns of a short run."""

import jax
import jax.numpy as jnp
import numpy as np
from learner_testlib import assert_leaves_equal

from rljax_offline import spaces as sp
from rljax_offline.learning.data_parallel import DataParallel, select_devices
from rljax_offline.learning.init import init_state


def spec_of(config, obs_space, act_space):
    return config.make_spec(sp.to_spec(obs_space), sp.to_spec(act_space))


def run_updates(spec, batch, *counts, seed=0):
    """The state and metrics after each of `counts` updates (ascending) of `spec` on the
    same batch; one compiled step (plain jit, one device)."""
    dp = DataParallel(spec.learning, select_devices(1), len(batch["obs"]), mode="jit")
    state = dp.put_replicated(init_state(spec.learning, seed))
    batch = {k: jnp.asarray(v) for k, v in batch.items()}
    out, done, metrics = [], 0, None
    for count in counts:
        for _ in range(count - done):
            state, metrics = dp.step(state, batch)
        done = count
        out.append(jax.device_get((state, metrics)))
    return out[0] if len(out) == 1 else out


def assert_resume_is_exact(config, tmp_path, iterations=3, restore_with_config=False):
    """`iterations` straight == 1 iteration, save, `from_checkpoint` (the algorithm's class;
    without the config, the registry rebuilds the algorithm by name), the rest: every module's
    learner metrics and the whole state (params, target copies, optimizer states, extras, RNG,
    connector state; every module's for a multi-agent algorithm) bit for bit. The straight run
    is the one saved after its first iteration: saving leaves it as it was."""
    straight = config.build()

    def module_metrics(algo):
        learners = algo.train()["learners"]
        return {m: {k: np.asarray(v).tolist() for k, v in metrics.items()}
                for m, metrics in learners.items()
                if m != "__all_modules__"}

    metrics_straight = [module_metrics(straight)]
    straight.save(str(tmp_path / "ckpt"))
    metrics_straight += [module_metrics(straight) for _ in range(iterations - 1)]
    resumed = type(straight).from_checkpoint(str(tmp_path / "ckpt"),
                                             config if restore_with_config else None)
    assert type(resumed.config) is type(config) and resumed.iteration == 1
    assert [module_metrics(resumed) for _ in range(iterations - 1)] == metrics_straight[1:]
    want, got = jax.device_get((straight.state, resumed.state))
    assert jax.tree_util.tree_structure(want) == jax.tree_util.tree_structure(got)
    assert_leaves_equal(want, got)
    states = want.values() if isinstance(want, dict) else [want]  # multi-agent: by group
    steps = {int(n) for state in states for n in np.ravel(state.step)}  # (stacked modules)
    assert steps == {iterations * config.num_updates_per_iteration}, steps
    straight.stop()
    resumed.stop()


def evaluation_returns(config, iterations):
    """The mean evaluation return after each of `iterations` train() calls."""
    algo = config.build()
    returns = [algo.train()["evaluation"]["env_runners"]["episode_return_mean"]
               for _ in range(iterations)]
    algo.stop()
    return returns


def level(returns, last=2):
    """What a run has learned, not its luckiest evaluation: the mean of the last `last`."""
    return float(np.mean(returns[-last:]))
