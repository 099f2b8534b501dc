"""What an online algorithm (PPO, SAC) adds to the offline `Algorithm` facade: an exploring
policy that samples *continuing* episodes from gymnasium vector envs (RLlib's env runners keep
their envs between iterations), RLlib's smoothed episode metrics over the latest finished
episodes, and closing the envs.

`train()` is `Algorithm.train`, the one loop of every algorithm: the data source (`source`,
made by `make_source`) samples, then trains on the samples and says what it did. What is done
with the samples lives in the source, not in overrides of this facade: PPO's `ppo.rollouts.Rollouts`
(epochs on each fresh rollout), SAC's `sac.replay.Replay` (a replay buffer, saved with a
checkpoint where asked)."""

from __future__ import annotations

import collections
import functools
from typing import Any

import numpy as np

from rljax_offline.acting.env_runner import SAMPLING, EnvRunner, stream_seed
from rljax_offline.algorithms.algorithm import Algorithm


class OnlineAlgorithm(Algorithm):
    """The sampling side shared by the online algorithms (see the module docstring)."""

    # Online state, none of it before the first iteration.
    _sampler = None
    _sampling_actor = None
    env_steps_sampled = 0

    def make_source(self) -> Any:
        """The online algorithm's data source (PPO's rollouts, SAC's replay buffer): see
        `algorithms.data_sources` for what it has."""
        raise NotImplementedError(f"{type(self).__name__} names no data source "
                                  "(make_source)")

    def sample(self):
        """One iteration's rollouts, as the data source asks for them: `(episode chunks,
        [(return, length)] finished)`."""
        return self.source.sample(self)

    @functools.cached_property
    def _recent(self) -> collections.deque:
        """The (return, length) of the latest finished sampling episodes."""
        return collections.deque(maxlen=self.config.metrics_num_episodes_for_smoothing)

    def _explorer(self):
        """The exploring (sampling) policy, compiled once; its params follow the state."""
        if self._sampling_actor is None:
            self._sampling_actor = self._new_actor(explore=True)
        return self._synced(self._sampling_actor)

    def sample_steps(self, num_steps: int, lookback: int = 0, complete: bool | None = None):
        """`num_steps` env steps with the exploring policy, as the env-runner options say
        (`complete=True`: whole episodes whatever `batch_mode` says):
        `rollout_fragment_length` rounds the count up to whole rounds of that many steps per
        env; `batch_mode="truncate_episodes"` cuts episodes there (at most one step more per
        env) and continues them next call, `"complete_episodes"` samples whole episodes
        only. Returns `(episode chunks, [(return, length)] of the episodes that finished)`;
        with `offline_data(output=...)` the finished episodes are recorded. The envs are
        made on the first call and kept."""
        c = self.config
        actor = self._explorer()
        if self._sampler is None:
            self._sampler = EnvRunner(c.env, actor, num_envs=c.num_envs_per_env_runner,
                                      seed=stream_seed(c.seed, SAMPLING, self.iteration),
                                      env_config=c.env_config)
        self._sampler.policy = actor
        if c.rollout_fragment_length != "auto":
            round_steps = c.rollout_fragment_length * c.num_envs_per_env_runner
            num_steps = -(-num_steps // round_steps) * round_steps
        if complete is None:
            complete = c.batch_mode == "complete_episodes"
        if complete:
            chunks, finished = self._sampler.sample_complete(num_steps)
        else:
            chunks, finished = self._sampler.sample_continuing(num_steps, lookback)
        self.record("sampled", chunks)
        return chunks, finished

    def load_data(self) -> None:
        """Online: there is nothing to read."""

    def _episode_metrics(self) -> dict:
        """RLlib's `env_runners/episode_return_mean` and its kin over the latest episodes."""
        if not self._recent:
            return {"episode_return_mean": float("nan"), "episode_len_mean": float("nan")}
        returns = np.array([r for r, _ in self._recent])
        return {"episode_return_mean": float(returns.mean()),
                "episode_return_min": float(returns.min()),
                "episode_return_max": float(returns.max()),
                "episode_len_mean": float(np.mean([n for _, n in self._recent]))}

    def _sampling_result(self, steps: int, finished: list, sample_s: float) -> dict:
        """Counts the iteration's `steps` sampled env steps (`finished` episodes among
        them); RLlib's env-runner metrics of them."""
        self.env_steps_sampled += steps
        self._recent.extend(finished)
        return {"env_runners": {**self._episode_metrics(), "num_episodes": len(finished),
                                "num_env_steps_sampled": steps,
                                "num_env_steps_sampled_lifetime": self.env_steps_sampled,
                                "sample_time_s": sample_s},
                "num_env_steps_sampled_lifetime": self.env_steps_sampled}

    def _evaluation(self) -> dict:
        """The env runners' returns: an online run holds out no offline episodes to
        estimate on."""
        return {"env_runners": self.evaluate()}

    def restore(self, path: str) -> None:
        super().restore(path)
        last = self.history[-1] if self.history else {}
        self.env_steps_sampled = int(last.get("num_env_steps_sampled_lifetime", 0))

    def stop(self) -> None:
        super().stop()
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None
