"""`SeedRuns`: N independent runs of one offline config, trained in one compiled program.

Researchers run every comparison over several seeds; in JAX the natural form is one program
over a seed axis (`learning.seeds`), where d3rlpy and CORL run a process per seed. It is a
config option: `config.debugging(seeds=[0, 1, 2, 3]).build()` returns this facade. One
`Algorithm` of the config (with `seed = seeds[0]`) reads the data once and builds the
pipelines; the train state gets a leading seed axis (each seed its own params, optimizer
states and RNG, so its own minibatch draws), and each iteration is one `vmap`ped scan of
updates over the devices.

* `train()`: one iteration of every seed: `{"per_seed": [metrics, ...], "mean": {...},
  "std": {...}}` (the learners' metrics over seeds); with `evaluation_interval`, an
  `"evaluation"` of every seed as `evaluate()` returns it;
* `evaluate()`: each seed's greedy policy in the env (one compiled actor, its params swapped),
  returns per seed and their mean +- std;
* `save(path)`, `restore(path)`, `Algorithm.from_checkpoint(path)`: every seed in one
  checkpoint, continued exactly; `load_policy(path, seed=s)` takes one seed's policy out;
* `policy(i)`, `save_seed(path, i)`, `export_policy(path, i)`: one seed picked out: its
  `TrainedPolicy`, its checkpoint (a checkpoint of the algorithm with `seed = seeds[i]`,
  which `Algorithm.from_checkpoint`, `load_policy`, OPE and fine-tuning take as any other),
  its exported greedy step.

Offline single-agent algorithms on materialized data (streamed data, online learners and
multi-agent configs are a `ConfigError` of the config). Seed `i` equals the separate run of
the config with `seed = seeds[i]` (in float64 to summation order: `tests/test_seeds.py`; in
float32 to rounding).

Example:
    >>> from rljax_offline import IQLConfig
    >>> config = (IQLConfig().environment("Pendulum-v1").offline_data(input_="/tmp/pendulum")
    ...           .training(num_updates_per_iteration=10).evaluation(evaluation_interval=0)
    ...           .debugging(seeds=[0, 1, 2, 3]))
    >>> runs = config.build()
    >>> result = runs.train()   # per seed, and mean and std over the seeds
    >>> {"mean", "std"} <= set(result)
    True
    >>> runs.stop()
"""

from __future__ import annotations

import time
from typing import Any

import jax
import numpy as np

from rljax_offline.acting.actor import actor_for
from rljax_offline.acting.env_runner import EVALUATION, EnvRunner, episode_stats, stream_seed
from rljax_offline.algorithms import checkpointing
from rljax_offline.algorithms.algorithm import Algorithm
from rljax_offline.errors import ConfigError
from rljax_offline.export import export_policy, policy_parts
from rljax_offline.learning import checkpoint as ckpt
from rljax_offline.learning.seeds import init_seed_states, scan_over_seeds, seed_slice
from rljax_offline.learning.trained_policy import TrainedPolicy, make_policy


def _mean_std(rows: list[dict]) -> tuple[dict, dict]:
    keys = [k for k in rows[0] if all(np.ndim(r.get(k)) == 0 for r in rows)]
    values = {k: np.array([float(r[k]) for r in rows]) for k in keys}
    return ({k: float(v.mean()) for k, v in values.items()},
            {k: float(v.std()) for k, v in values.items()})


class SeedRuns:
    """N runs of `config` over `config.seeds` in one program (see the module docstring);
    built by `config.build()`.

    Args:
      config: an offline config with `debugging(seeds=[...])`.
      process: the process-wide setup `build()` did (None: the current one).
    """

    def __init__(self, config: Any, process: Any = None):
        config.validate()
        if config.seeds is None:
            raise ConfigError("SeedRuns trains the seeds of config.debugging(seeds=[...]); "
                              "this config has none")
        self.config = config
        self.seeds = [int(s) for s in config.seeds]
        self.algo = Algorithm(self._one(0), process)
        self.algo.load_data()
        cstate = jax.device_get(self.algo.state.connector_state)
        self.states = self.algo.dp.put_replicated(
            init_seed_states(self.algo.spec.learning, self.seeds, cstate))
        self._scan = None
        self.iteration = 0
        self.history: list[dict] = []

    @property
    def algo_name(self) -> str:
        return self.config.algo_name

    def _one(self, i: int) -> Any:
        """The config of seed `seeds[i]`'s run alone."""
        return self.config.debugging(seed=self.seeds[i], seeds=None)

    def train(self) -> dict:
        """One iteration of every seed (`num_updates_per_iteration` updates each)."""
        t0 = time.perf_counter()
        n = self.config.updates_per_iteration
        if self._scan is None:
            self._scan = scan_over_seeds(self.algo.dp, n, self.config.sample_unit,
                                         self.algo.sample_window)
        self.states, metrics = self._scan(self.states, self.algo.data.device_data)
        metrics = jax.device_get(metrics)
        per_seed = [{k: float(v[i]) for k, v in metrics.items()}
                    for i in range(len(self.seeds))]
        self.iteration += 1
        mean, std = _mean_std(per_seed)
        result = {"training_iteration": self.iteration, "algorithm": self.algo_name,
                  "seeds": self.seeds,
                  "num_module_steps_trained": n * self.algo.timesteps_per_update,
                  "per_seed": per_seed, "mean": mean, "std": std}
        interval = self.config.evaluation_interval
        if interval and self.iteration % interval == 0:
            result["evaluation"] = self.evaluate()
        result["time_this_iter_s"] = time.perf_counter() - t0
        self.history.append(result)
        return result

    def policy(self, i: int) -> TrainedPolicy:
        """Seed `seeds[i]`'s trained policy (host copies).

        Args:
          i: the seed's index in `seeds`.
        """
        state = jax.device_get(seed_slice(self.states, i))
        return make_policy(self._one(i), (self.algo._obs_space, self.algo._act_space),
                           state.params, state.connector_state,
                           (self.algo.spec, self.algo.pipelines))

    def evaluate(self, num_episodes: int | None = None) -> dict:
        """Each seed's greedy policy in the env: `{"per_seed": [env-runner metrics, ...],
        "episode_return_mean": mean over seeds, "episode_return_std": std over seeds}`.

        Args:
          num_episodes: episodes per seed (None: `evaluation_duration`).
        """
        c = self.config
        n = num_episodes or c.evaluation_duration
        actor = actor_for(self.policy(0), c.evaluation_explore)
        runner = EnvRunner(c.env, actor, num_envs=min(c.evaluation_num_envs, n),
                           seed=stream_seed(self.seeds[0], EVALUATION), env_config=c.env_config)
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

    def export_policy(self, path: str, i: int, format: str = "stablehlo") -> str:
        """Seed `seeds[i]`'s greedy acting step as one graph (`Algorithm.export_policy`).

        Args:
          path: where to write it (its signature goes to `<path>.json`).
          i: the seed's index in `seeds`.
          format: "stablehlo" or another format `rljax_offline.export` writes.
        """
        return export_policy(policy_parts(self.policy(i)), path, format)

    def save_seed(self, path: str, i: int) -> str:
        """A checkpoint of seed `seeds[i]` alone: the algorithm's checkpoint with that seed
        (loads with `Algorithm.from_checkpoint`, `load_policy`, OPE and fine-tuning).

        Args:
          path: the checkpoint folder.
          i: the seed's index in `seeds`.
        """
        config = self._one(i)
        history = [{**{k: v for k, v in r.items()
                       if k not in ("per_seed", "mean", "std", "evaluation")},
                    "learners": r["per_seed"][i]} for r in self.history]
        meta = {"format": checkpointing.CHECKPOINT_FORMAT, "algorithm": config.algo_name,
                "config": config.to_dict(), "iteration": self.iteration, "history": history}
        return ckpt.save_checkpoint(path, jax.device_get(seed_slice(self.states, i)), meta)

    def save(self, path: str) -> str:
        """A checkpoint of every seed (the stacked state; `meta.json` names the seeds):
        `restore` and `Algorithm.from_checkpoint` continue all of them,
        `load_policy(path, seed=s)` takes one out.

        Args:
          path: the checkpoint folder.
        """
        history = [{k: v for k, v in r.items() if k != "per_seed"} for r in self.history]
        meta = {"format": checkpointing.CHECKPOINT_FORMAT, "algorithm": self.algo_name,
                "config": self.config.to_dict(), "iteration": self.iteration,
                "history": history, "seeds": self.seeds}
        return ckpt.save_checkpoint(path, jax.device_get(self.states), meta)

    def restore(self, path: str) -> None:
        """Continues every seed of a checkpoint of the same algorithm and seeds.

        Args:
          path: the checkpoint folder (`save`'s).
        """
        meta = ckpt.load_meta(path)
        if meta.get("seeds") != self.seeds or meta.get("algorithm") != self.algo_name:
            raise ckpt.CheckpointError(
                f"checkpoint {path!r} holds {meta.get('algorithm')!r} seeds "
                f"{meta.get('seeds')}, not {self.algo_name!r} seeds {self.seeds}")
        self.states = self.algo.dp.put_replicated(
            ckpt.load_state(path, jax.device_get(self.states)))
        self.iteration = int(meta["iteration"])
        self.history = list(meta.get("history", []))

    def stop(self) -> None:
        """Stops the algorithm that holds the data (its threads, its envs)."""
        self.algo.stop()
