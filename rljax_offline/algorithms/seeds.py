"""`SeedRuns`: N independent runs of one offline config, trained in one compiled program.

Researchers run every comparison over several seeds; in JAX the natural form is one program
over a seed axis (`learning.seeds`), where d3rlpy and CORL run a process per seed. One
`Algorithm` of the config reads the data once and builds the pipelines; the train state gets
a leading seed axis (each seed its own params, optimizer states and RNG, so its own
minibatch draws), and each iteration is one `vmap`ped scan of updates over the devices.

* `train()`: one iteration of every seed: `{"per_seed": [metrics, ...], "mean": {...},
  "std": {...}}` (the learners' metrics over seeds);
* `evaluate()`: each seed's greedy policy in the env (one compiled actor, its params swapped),
  returns per seed and their mean +- std;
* `policy(i)`, `save(path, i)`: one seed's `TrainedPolicy`, or its checkpoint (a checkpoint of
  the algorithm with `seed = seeds[i]`: `Algorithm.from_checkpoint`, `load_policy`, export,
  OPE and fine-tuning take it as any other);
* `save_all(path)`, `restore(path)`: every seed in one checkpoint, continued exactly;
  `load_policy(path, seed=s)` takes one seed's policy out of it.

Offline algorithms on materialized data (streamed data and online learners are a
`ConfigError`). Seed `i` equals the separate run of the config with `seed = seeds[i]` (in
float64 to summation order: `tests/test_seeds.py`; in float32 to rounding).

Example:
    >>> from rljax_offline import IQLConfig
    >>> config = (IQLConfig().environment("Pendulum-v1").offline_data(input_="/tmp/pendulum")
    ...           .training(num_updates_per_iteration=10).evaluation(evaluation_interval=0))
    >>> runs = SeedRuns(config, seeds=[0, 1, 2, 3])
    >>> result = runs.train()   # per seed, and mean and std over the seeds
    >>> {"mean", "std"} <= set(result)
    True
    >>> runs.stop()
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from rljax_offline.acting.actor import actor_for
from rljax_offline.acting.env_runner import EVALUATION, EnvRunner, episode_stats, stream_seed
from rljax_offline.algorithms import checkpointing
from rljax_offline.errors import ConfigError
from rljax_offline.learning import checkpoint as ckpt
from rljax_offline.learning.seeds import init_seed_states, scan_over_seeds, seed_slice
from rljax_offline.learning.trained_policy import TrainedPolicy, make_policy


def _mean_std(rows: list[dict]) -> tuple[dict, dict]:
    keys = [k for k in rows[0] if all(np.ndim(r.get(k)) == 0 for r in rows)]
    values = {k: np.array([float(r[k]) for r in rows]) for k in keys}
    return ({k: float(v.mean()) for k, v in values.items()},
            {k: float(v.std()) for k, v in values.items()})


class SeedRuns:
    """N runs of `config` over `seeds` in one program (see the module docstring)."""

    def __init__(self, config: Any, seeds: Sequence[int]):
        seeds = [int(s) for s in seeds]
        if not seeds or len(set(seeds)) != len(seeds):
            raise ConfigError(f"SeedRuns needs distinct seeds, got {seeds}")
        if config.trains_online or config.streams_data:
            raise ConfigError(f"SeedRuns trains offline algorithms on materialized data; "
                              f"{type(config).__name__} "
                              f"{'trains online' if config.trains_online else 'streams'}")
        self.seeds = seeds
        self.config = config.debugging(seed=seeds[0])
        self.algo = self.config.build()
        self.algo.load_data()
        cstate = jax.device_get(self.algo.state.connector_state)
        self.states = self.algo.dp.put_replicated(
            init_seed_states(self.algo.spec.learning, seeds, cstate))
        self._scan = None
        self.iteration = 0
        self.history: list[dict] = []

    def train(self) -> dict:
        """One iteration of every seed (`num_updates_per_iteration` updates each)."""
        n = self.config.updates_per_iteration
        if self._scan is None:
            self._scan = scan_over_seeds(self.algo.dp, n, self.config.sample_unit)
        self.states, metrics = self._scan(self.states, self.algo.data.device_data)
        metrics = jax.device_get(metrics)
        per_seed = [{k: float(v[i]) for k, v in metrics.items()}
                    for i in range(len(self.seeds))]
        self.iteration += 1
        mean, std = _mean_std(per_seed)
        result = {"training_iteration": self.iteration, "seeds": self.seeds,
                  "num_module_steps_trained": n * self.algo.timesteps_per_update,
                  "per_seed": per_seed, "mean": mean, "std": std}
        self.history.append(result)
        return result

    def policy(self, i: int) -> TrainedPolicy:
        """Seed `seeds[i]`'s trained policy (host copies)."""
        state = jax.device_get(seed_slice(self.states, i))
        return make_policy(self.config.debugging(seed=self.seeds[i]),
                           (self.algo._obs_space, self.algo._act_space), state.params,
                           state.connector_state, (self.algo.spec, self.algo.pipelines))

    def evaluate(self, num_episodes: int | None = None) -> dict:
        """Each seed's greedy policy in the env: `{"per_seed": [env-runner metrics, ...],
        "episode_return_mean": mean over seeds, "episode_return_std": std over seeds}`."""
        c = self.config
        n = num_episodes or c.evaluation_duration
        actor = actor_for(self.policy(0), c.evaluation_explore)
        runner = EnvRunner(c.env, actor, num_envs=min(c.evaluation_num_envs, n),
                           seed=stream_seed(c.seed, EVALUATION), env_config=c.env_config)
        per_seed = []
        try:
            for i, seed in enumerate(self.seeds):
                policy = self.policy(i)
                actor.params, actor.e2m_state = policy.params, policy.env_to_module_state()
                runner.seed = stream_seed(seed, EVALUATION, self.iteration)
                per_seed.append(episode_stats(runner.sample(num_episodes=n)))
        finally:
            runner.close()
        returns = np.array([s["episode_return_mean"] for s in per_seed])
        return {"per_seed": per_seed, "episode_return_mean": float(returns.mean()),
                "episode_return_std": float(returns.std())}

    def save(self, path: str, i: int) -> str:
        """A checkpoint of seed `seeds[i]` alone: the algorithm's checkpoint with that seed
        (loads with `Algorithm.from_checkpoint` and `load_policy`)."""
        config = self.config.debugging(seed=self.seeds[i])
        history = [{**{k: v for k, v in r.items() if k not in ("per_seed", "mean", "std")},
                    "learners": r["per_seed"][i]} for r in self.history]
        meta = {"format": checkpointing.CHECKPOINT_FORMAT, "algorithm": config.algo_name,
                "config": config.to_dict(), "iteration": self.iteration, "history": history}
        return ckpt.save_checkpoint(path, jax.device_get(seed_slice(self.states, i)), meta)

    def save_all(self, path: str) -> str:
        """A checkpoint of every seed (the stacked state; `meta.json` names the seeds):
        `restore` continues all of them, `load_policy(path, seed=s)` takes one out."""
        history = [{k: v for k, v in r.items() if k != "per_seed"} for r in self.history]
        meta = {"format": checkpointing.CHECKPOINT_FORMAT, "algorithm": self.config.algo_name,
                "config": self.config.to_dict(), "iteration": self.iteration,
                "history": history, "seeds": self.seeds}
        return ckpt.save_checkpoint(path, jax.device_get(self.states), meta)

    def restore(self, path: str) -> None:
        """Continues every seed of a `save_all` checkpoint of the same seeds."""
        meta = ckpt.load_meta(path)
        if meta.get("seeds") != self.seeds or meta.get("algorithm") != self.config.algo_name:
            raise ckpt.CheckpointError(
                f"checkpoint {path!r} holds {meta.get('algorithm')!r} seeds "
                f"{meta.get('seeds')}, not {self.config.algo_name!r} seeds {self.seeds}")
        self.states = self.algo.dp.put_replicated(
            ckpt.load_state(path, jax.device_get(self.states)))
        self.iteration = int(meta["iteration"])
        self.history = list(meta.get("history", []))

    def stop(self) -> None:
        """Stops the algorithm that holds the data (its threads, its envs)."""
        self.algo.stop()
