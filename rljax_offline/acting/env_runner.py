"""`EnvRunner`: steps gymnasium vector envs with a policy and produces `Episode`s.

The runner speaks one protocol to the policy (`acting.protocol.ActorProtocol`: `reset`,
`select`, `observe`, `running`, `custom_data`), which
* an `ActorPolicy` (`rljax_offline.acting.actor`; what `Algorithm.actor()` returns) speaks:
  env-to-module -> module -> module-to-env on the device, one jitted call a step, lookback
  window and recurrent state kept on the device; its `action_logp`, `action_dist_inputs` and
  `state_out` are recorded per step;
* a `BehaviorPolicy` (`rljax_offline.acting.behavior`) speaks, tagging each episode with
  its behaviour;
* any callable `obs_batch -> actions` (or `-> (actions, extra_outputs)`), e.g. a scripted
  expert, is brought into once (`CallableActor`); with `env_to_module=` / `module_to_env=`
  pipelines it runs between them, inside an `ActorPolicy` (it must then be traceable by
  `jax.jit`).

Vector envs use gymnasium's NEXT_STEP autoreset: the step after an episode ends only resets
that sub-env; the runner drops that step's action and starts a new episode from its obs.

Episodes are built with `EpisodeBuilder` and handed out as they finish, so `record` streams
them to Parquet without holding the whole recording in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np

from rljax_offline.acting.actor import ActorPolicy
from rljax_offline.acting.behavior import Behavior, BehaviorError, BehaviorPolicy, parse_mix
from rljax_offline.acting.experts import expert_for
from rljax_offline.acting.protocol import ActorProtocol, as_actor
from rljax_offline.connectors.core import Spaces
from rljax_offline.data import EpisodeWriter
from rljax_offline.envs.make import env_factory
from rljax_offline.episode.builder import EpisodeBuilder
from rljax_offline.episode.episode import Episode
from rljax_offline.models.module import callable_module


def make_vector_env(env: Any, num_envs: int,
                    env_config: dict | None = None) -> gym.vector.VectorEnv:
    """A synchronous vector env from an env id or a factory `env_config -> env`.

    Args:
      env: a gymnasium id or a factory `env_config -> gym.Env`.
      num_envs: the env copies.
      env_config: the factory's argument (ignored for an id).

    Returns:
      The `gymnasium.vector.SyncVectorEnv`.
    """
    make_one = env_factory(env, env_config)
    fns = [make_one] * num_envs
    return gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)


SAMPLING, EVALUATION = 0, 1  # an algorithm's streams of episodes (`stream_seed`)


def stream_seed(seed: int, *stream: int) -> int:
    """The reset seed of one stream of episodes of a run seeded `seed` (an evaluation, the
    sampler), drawn from `(seed, *stream)`. A vector env seeds its envs `s, s + 1, ...`, so a
    seed like `seed + 1_000 * iteration` gives runs of neighbouring seeds mostly the same
    start states: their evaluations then share one draw of them, and its bias.

    Args:
      seed: the run's seed.
      *stream: the stream's ids (e.g. evaluation, iteration).
    """
    return int(np.random.SeedSequence([seed, *stream]).generate_state(1)[0] >> 1)


class EnvRunner:
    """Runs `policy` in `num_envs` copies of `env`.

    Args:
      env: a gymnasium id (`"CartPole-v1"`) or a factory `env_config -> gym.Env`.
      policy: see the module docstring.
      num_envs: vectorised env copies stepped together (one policy call per step).
      seed: seeds the envs' resets (episode k of env i is reproducible) and the policy RNG.
      env_config: the argument of an env factory (ignored for a gymnasium id).
      env_to_module: optional env-to-module connector pipeline around a plain `policy`
        (see `ActorPolicy`).
      module_to_env: optional module-to-env connector pipeline around a plain `policy`.
      env_to_module_state: the fitted env-to-module state (else fresh).
      lookback: the past steps env-to-module reads.
      explore: sample instead of acting greedily.
    """

    def __init__(self, env: Any, policy: Callable | Any, *, num_envs: int = 1, seed: int = 0,
                 env_config: dict | None = None, env_to_module: Any = None,
                 module_to_env: Any = None, env_to_module_state: Any = None,
                 lookback: int = 0, explore: bool = False):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.env_id, self.num_envs, self.seed = env, num_envs, seed
        self.venv = make_vector_env(env, num_envs, env_config)
        self.observation_space = self.venv.single_observation_space
        self.action_space = self.venv.single_action_space
        if env_to_module is not None or module_to_env is not None:
            policy = ActorPolicy(
                callable_module(policy), None,
                Spaces.of(self.observation_space, self.action_space), env_to_module,
                env_to_module_state, module_to_env, lookback=lookback, explore=explore)
        self.policy = policy
        self._rng = np.random.default_rng(seed)
        self._resets = 0

    @property
    def policy(self) -> ActorProtocol:
        """The actor the runner drives; set a new one (or a plain callable) between calls."""
        return self._policy

    @policy.setter
    def policy(self, policy: Any) -> None:
        self._policy = as_actor(policy)

    def close(self) -> None:
        self.venv.close()

    def _seed(self) -> int:
        return int(self._rng.integers(2**31))

    def _act(self, obs: np.ndarray):
        if not self._policy.running(self.num_envs):  # a new actor mid-stream: no lookback
            self._policy.reset(obs, self._seed())
        actions, extras = self._policy.select()
        actions = np.asarray(actions)
        if isinstance(self.action_space, gym.spaces.Discrete):
            actions = actions.astype(np.int64).reshape(self.num_envs)
        else:
            actions = actions.reshape(self.num_envs, *self.action_space.shape).astype(
                self.action_space.dtype)
        return actions, extras

    def _new_builder(self, obs, i: int) -> EpisodeBuilder:
        """Env `i`'s new episode, from its reset observation in `obs`; called after the actor
        saw that observation (its `custom_data` for the episode is then known)."""
        builder = EpisodeBuilder(observation_space=self.observation_space,
                                 action_space=self.action_space)
        builder.add_env_reset(_row(obs, i))
        builder.custom_data.update(self._policy.custom_data(i))
        return builder

    def _reset_all(self):
        """Resets every env: `(obs, builders, pending)` for `_step_all`."""
        obs, _ = self.venv.reset(seed=self.seed + self._resets)
        self._resets += 1
        self._policy.reset(obs, self._seed())
        builders = [self._new_builder(obs, i) for i in range(self.num_envs)]
        return obs, builders, np.zeros(self.num_envs, bool)

    def _step_all(self, builders: list[EpisodeBuilder], obs, pending: np.ndarray):
        """One policy call and one vector-env step, recorded into `builders` (in place).
        Returns `(obs, done, steps)`: the new observations, the envs whose episode ended on
        this step (marked in `pending`; their builders still to be finalized), and the
        steps recorded (envs that only reset, NEXT_STEP autoreset, record none)."""
        actions, extras = self._act(obs)
        obs, rew, term, trunc, _ = self.venv.step(actions)
        self._policy.observe(rew, obs, pending)  # pending: these envs only reset
        done, steps = [], 0
        for i in range(self.num_envs):
            if pending[i]:  # NEXT_STEP autoreset: this step only reset env i
                builders[i] = self._new_builder(obs, i)
                pending[i] = False
                continue
            builders[i].add_env_step(_row(obs, i), actions[i], float(rew[i]),
                                     terminated=bool(term[i]), truncated=bool(trunc[i]),
                                     extra_model_outputs=None if extras is None
                                     else _row(extras, i))
            steps += 1
            if term[i] or trunc[i]:
                pending[i] = True
                done.append(i)
        return obs, done, steps

    def episodes(self, num_episodes: int | None = None,
                 num_timesteps: int | None = None) -> Iterator[Episode]:
        """Yields finished episodes until `num_episodes` finished (or `num_timesteps` steps
        were taken; then the unfinished ones come last, as not-done chunks)."""
        if (num_episodes is None) == (num_timesteps is None):
            raise ValueError("give exactly one of num_episodes or num_timesteps")
        obs, builders, pending = self._reset_all()
        finished = steps = 0
        while True:
            obs, done, n = self._step_all(builders, obs, pending)
            steps += n
            for i in done:
                finished += 1
                yield builders[i].finalize()
                if num_episodes is not None and finished >= num_episodes:
                    return
            if num_timesteps is not None and steps >= num_timesteps:
                for i in range(self.num_envs):
                    if not pending[i] and len(builders[i]):
                        yield builders[i].finalize()
                return

    def sample_continuing(self, num_timesteps: int, lookback: int = 0
                          ) -> tuple[list[Episode], list[tuple[float, int]]]:
        """On-policy sampling (PPO): steps the envs until `num_timesteps` steps were taken,
        *continuing* the episodes the previous call left running (RLlib's env runners keep
        their envs between iterations). Returns `(chunks, finished)`: every piece of
        experience of this call (finished episodes' last chunks, and not-done chunks of the
        running ones, cut here and continued next call), and the episodes that finished
        this call, as `(return, length)` of the whole episode (the episode metrics).
        A continuing chunk keeps the last `lookback` steps of the one before as its lookback
        (a recurrent policy's `state_in` is the `state_out` recorded there)."""
        if num_timesteps < 1:
            raise ValueError(f"num_timesteps must be >= 1, got {num_timesteps}")
        live = getattr(self, "_live", None)
        if live is None:
            obs, builders, pending = self._reset_all()
            live = self._live = {"obs": obs, "builders": builders, "pending": pending,
                                 "whole": [[] for _ in range(self.num_envs)]}
        obs, builders, pending, whole = (live["obs"], live["builders"], live["pending"],
                                         live["whole"])
        chunks: list[Episode] = []
        finished: list[tuple[float, int]] = []
        steps = 0
        while steps < num_timesteps:
            obs, done, n = self._step_all(builders, obs, pending)
            steps += n
            for i in done:
                last = builders[i].finalize()
                chunks.append(last)
                finished.append((sum(r for r, _ in whole[i]) + last.get_return(),
                                 sum(n for _, n in whole[i]) + len(last)))
                whole[i] = []
        for i in range(self.num_envs):
            if not pending[i] and len(builders[i]):
                chunk = builders[i].finalize()
                chunks.append(chunk)
                whole[i].append((chunk.get_return(), len(chunk)))
                builders[i] = builders[i].cut(len_lookback_buffer=lookback)
        live["obs"] = obs
        return chunks, finished

    def sample_complete(self, num_timesteps: int
                        ) -> tuple[list[Episode], list[tuple[float, int]]]:
        """RLlib's `batch_mode="complete_episodes"`: whole episodes only, at least
        `num_timesteps` steps of them. From fresh resets, steps the envs until
        `num_timesteps` steps were taken, then each env until the episode it is in ends;
        episodes an env begins after that are not kept. Returns `(episodes, finished)` as
        `sample_continuing` does (here every episode is finished)."""
        if num_timesteps < 1:
            raise ValueError(f"num_timesteps must be >= 1, got {num_timesteps}")
        self._live = None  # the next continuing call starts from fresh resets too
        obs, builders, pending = self._reset_all()
        episodes: list[Episode] = []
        retired = np.zeros(self.num_envs, bool)  # done after the step count was reached
        steps = 0
        while not retired.all():
            obs, done, n = self._step_all(builders, obs, pending)
            steps += n
            for i in done:
                if not retired[i]:
                    episodes.append(builders[i].finalize())
                retired[i] = retired[i] or steps >= num_timesteps
        return episodes, [(ep.get_return(), len(ep)) for ep in episodes]

    def sample(self, *, num_episodes: int | None = None,
               num_timesteps: int | None = None) -> list[Episode]:
        return list(self.episodes(num_episodes, num_timesteps))

    def evaluate(self, num_episodes: int = 10) -> dict:
        """RLlib's env-runner metrics over `num_episodes` finished episodes."""
        return episode_stats(self.sample(num_episodes=num_episodes))

    def record(self, path: str, *, num_episodes: int | None = None,
               num_timesteps: int | None = None, progress: bool = False,
               **write_options) -> list[str]:
        """Streams `num_episodes` finished episodes (or episodes and chunks covering
        `num_timesteps` steps) to Parquet under `path` (see `rljax_offline.data.EpisodeWriter`
        for `output_write_episodes`, `output_max_rows_per_file`, ...); returns the files."""
        total, unit = (num_episodes, "ep") if num_timesteps is None else (num_timesteps, "step")
        bar = _progress(total, "recording", progress, unit)
        with EpisodeWriter(path, **write_options) as writer:
            for ep in self.episodes(num_episodes=num_episodes, num_timesteps=num_timesteps):
                writer.write(ep)
                bar.update(1 if num_timesteps is None else len(ep))
        bar.close()
        return writer.close()


def _row(tree, i: int):
    """Env `i`'s row of a batch: an array, or a dict / tuple of them (Dict observations,
    nested extra outputs such as `state_out`)."""
    if isinstance(tree, np.ndarray):
        return tree[i]
    if isinstance(tree, dict):
        return {k: _row(v, i) for k, v in tree.items()}
    if isinstance(tree, tuple | list):
        return type(tree)(_row(v, i) for v in tree)
    return np.asarray(tree)[i]


def episode_stats(episodes: list[Episode]) -> dict:
    """RLlib's evaluation metrics of finished episodes: return mean, min and max, mean length,
    their count and every return.

    Args:
      episodes: the finished episodes.

    Raises:
      ValueError: no episodes.
    """
    returns = np.array([ep.get_return() for ep in episodes], float)
    lengths = np.array([len(ep) for ep in episodes], float)
    if not len(returns):
        raise ValueError("no finished episodes to evaluate")
    return {"episode_return_mean": float(returns.mean()),
            "episode_return_min": float(returns.min()),
            "episode_return_max": float(returns.max()),
            "episode_len_mean": float(lengths.mean()), "num_episodes": len(episodes),
            "episode_returns": returns.tolist()}


def _progress(total: int, desc: str, enabled: bool, unit: str = "ep"):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled, unit=unit, leave=False)


def record_expert(env_id: str, output: str, *, num_episodes: int = 500, seed: int = 0,
                  num_envs: int = 8, progress: bool = True, epsilon: float = 0.0,
                  flip_prob: float = 0.0, action_noise: float = 0.0, mix: Any = None,
                  **write_options) -> list[str]:
    """Records a shipped scripted expert (`rljax_offline.acting.experts`) to Parquet.

    `epsilon` (epsilon-random actions), `flip_prob` (Discrete: the expert's action replaced by
    another) and `action_noise` (Box: Gaussian noise, clipped to the bounds) perturb every
    episode; `mix` (a spec such as `"expert:0.1,random:0.6,flip0.4:0.3"`, or a list of
    `(Behavior, weight)`) draws one behaviour per episode instead. Episodes are tagged with
    their behaviour (see `rljax_offline.acting.behavior`). With none of them, the expert's
    actions are recorded unchanged, as before.

    Args:
      env_id: a gymnasium id with a shipped expert (`experts.expert_for`).
      output: the output folder.
      num_episodes: episodes to record.
      seed: the envs' and the behaviours' seed.
      num_envs: env copies stepped together.
      progress: print progress.
      epsilon: the probability of a uniformly random action.
      flip_prob: the probability of replacing a Discrete action by another.
      action_noise: the standard deviation of Gaussian noise on Box actions.
      mix: behaviours drawn per episode, a spec string or `(Behavior, weight)` pairs.
      **write_options: `EpisodeWriter`'s options (`output_write_episodes=False` for tabular
        rows, ...).

    Returns:
      The files written.

    Raises:
      ValueError: an env without a shipped expert.
      BehaviorError: a malformed behaviour or one the action space cannot take.
    """
    expert = expert_for(env_id)
    policy: Any = expert
    single = Behavior(epsilon=epsilon, flip_prob=flip_prob, action_noise=action_noise)
    if mix is not None and single != Behavior():
        raise BehaviorError("give either mix or epsilon/flip_prob/action_noise, not both "
                            "(write the perturbation into the mix, e.g. 'flip0.2+eps0.1:1')")
    runner = EnvRunner(env_id, expert, num_envs=num_envs, seed=seed)
    try:
        if mix is not None or single != Behavior():
            behaviors = single if mix is None else (parse_mix(mix) if isinstance(mix, str)
                                                    else mix)
            policy = BehaviorPolicy(expert, behaviors, runner.action_space, seed=seed)
        runner.policy = policy
        return runner.record(output, num_episodes=num_episodes, progress=progress,
                             **write_options)
    finally:
        runner.close()
