"""`BC`: behavior cloning from offline data, built from a `BCConfig`.

`train()` runs one iteration (`num_updates_per_iteration` updates, one jitted `lax.scan` over
all selected devices) and returns RLlib-style metrics; `evaluate()` runs the greedy policy in
the env; `save()`/`restore()` checkpoint everything needed to resume exactly.

Data: with `materialize_data=True` (default) the episodes are read once, turned into learner
columns by the learner connector pipeline (jitted, over length-bucketed `EpisodeBatch`es) and
kept on the devices. With `materialize_data=False` the episodes stream from the files through
a shuffle buffer, and each update takes exactly `train_batch_size_per_learner` timesteps.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import jax
import numpy as np

from rljax_offline.batch import EpisodeBatch
from rljax_offline.config import BCConfig
from rljax_offline.connectors import (
    Context,
    Spaces,
    default_env_to_module,
    default_learner,
    default_module_to_env,
)
from rljax_offline.episode import Episode
from rljax_offline.learners import checkpoint as ckpt
from rljax_offline.learners.bc import (
    DataParallel,
    TrainState,
    init_state,
    make_optimizer,
    make_update,
    prefetch_to_device,
    select_devices,
)
from rljax_offline.models.policy import make_policy

MODULE_ID = "default_policy"
_EPISODES_PER_BATCH = 64


def _env_spaces(config: BCConfig) -> tuple[gym.Space, gym.Space]:
    env = (gym.make(config.env, **config.env_config) if isinstance(config.env, str)
           else config.env(dict(config.env_config)))
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def _chunks(stream: Iterator, size: int) -> Iterator[list]:
    chunk = []
    for item in stream:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class BC:
    """Behavior cloning (see the module docstring). Build with `BCConfig(...).build()`."""

    def __init__(self, config: BCConfig):
        config.validate()
        self.config = config
        obs_space, act_space = _env_spaces(config)
        self.spaces = Spaces.of(obs_space, act_space)
        self._obs_space = obs_space
        custom = list(config.learner_connector(self.spaces)) if config.learner_connector else []
        self.learner_connector = default_learner(
            self.spaces, *custom,
            add_default_connectors=config.add_default_connectors_to_learner_pipeline)
        e2m_custom = (list(config.env_to_module_connector(self.spaces))
                      if config.env_to_module_connector else custom)
        self._n_shared = len(custom) if config.env_to_module_connector is None else 0
        self.env_to_module_connector = default_env_to_module(
            self.spaces, *e2m_custom,
            add_default_connectors=config.add_default_connectors_to_env_to_module_pipeline)
        self.module_to_env_connector = default_module_to_env(self.spaces)
        out = self.learner_connector.out_spaces(self.spaces)
        mc = config.model_config
        self.policy = make_policy(out.observation, out.action,
                                  fcnet_hiddens=mc.get("fcnet_hiddens", (256, 256)),
                                  fcnet_activation=mc.get("fcnet_activation", "relu"))
        self.optimizer = make_optimizer(config.lr, config.grad_clip)
        self.devices = select_devices(config.num_devices)
        self.dp = DataParallel(make_update(self.policy, self.optimizer), self.devices,
                               config.train_batch_size_per_learner)
        self.state: TrainState = self.dp.put_replicated(init_state(
            self.policy, self.optimizer, config.seed,
            connector_state=self.learner_connector.init(self.spaces)))
        self.iteration = 0
        self.history: list[dict] = []
        self._learner_apply = jax.jit(self.learner_connector.apply)
        self._data: dict | None = None
        self._stream: Iterator | None = None
        self._stream_cstate: Any = None
        self._scan = None
        self._actor = None
        self._runner = None
        self.timers: dict[str, float] = {}

    # ------------------------------------------------------------------ data

    def _read_options(self) -> dict:
        c = self.config
        return dict(input_read_episodes=c.input_read_episodes,
                    input_read_schema=c.input_read_schema, input_filesystem=c.input_filesystem,
                    input_filesystem_kwargs=c.input_filesystem_kwargs,
                    on_bad_file=c.on_bad_file, observation_space=self._obs_space)

    def _columns(self, episodes: list[Episode], connector_state: Any, fit: bool):
        """Learner columns of `episodes` (padding rows dropped), and the connector state."""
        apply = self._learner_apply
        episodes = sorted(episodes, key=len)
        groups = [episodes[i:i + _EPISODES_PER_BATCH]
                  for i in range(0, len(episodes), _EPISODES_PER_BATCH)]
        batches = [EpisodeBatch.from_episodes(g, pad_batch_to=_EPISODES_PER_BATCH)
                   for g in groups]
        if fit and jax.tree_util.tree_leaves(connector_state):
            for eb in batches:
                _, _, connector_state = apply(connector_state, eb, {}, Context())
        cols: dict[str, list] = {"obs": [], "actions": []}
        for eb in batches:
            _, batch, _ = apply(connector_state, eb, {}, Context(frozen=True))
            keep = np.asarray(batch["loss_mask"])
            for k in cols:
                cols[k].append(jax.tree_util.tree_map(lambda x, keep=keep: np.asarray(x)[keep],
                                                      batch[k]))
        out = {k: jax.tree_util.tree_map(lambda *xs: np.concatenate(xs), *v)
               for k, v in cols.items()}
        return out, connector_state

    def _episode_stream(self, epoch: int) -> Iterator[Episode]:
        """One shuffled pass over the data (a new shuffle seed each epoch)."""
        from rljax_offline.data import iter_episodes

        return iter_episodes(self.config.input_,
                             shuffle_buffer_size=max(self.config.shuffle_buffer_size, 1),
                             seed=self.config.seed + epoch,
                             prefetch=self.config.prefetch_batches, **self._read_options())

    def load_data(self) -> None:
        """Reads the data (RLlib does this in the first iteration); called by `train()`."""
        from rljax_offline.data import read_episodes

        if self.config.input_ is None:
            raise ValueError("no offline data: set config.offline_data(input_=...)")
        t0 = time.perf_counter()
        if self.config.materialize_data:
            episodes = read_episodes(self.config.input_, **self._read_options())
            if not episodes:
                raise ValueError(f"no episodes found in {self.config.input_!r}")
            cols, cstate = self._columns(episodes, self.state.connector_state, fit=True)
            self.state = self.dp.put_replicated(self.state._replace(connector_state=cstate))
            self._data = self.dp.put_replicated(cols)
            self.num_timesteps = int(len(cols["actions"]))
            self.num_episodes = len(episodes)
        else:
            self._stream = prefetch_to_device(self._global_batches(), self.dp.sharded,
                                              max(self.config.prefetch_batches, 1))
        self.timers["data_load_s"] = time.perf_counter() - t0

    def _global_batches(self) -> Iterator[dict]:
        """Exactly `train_batch_size_per_learner` timesteps a batch from streamed episodes,
        epoch after epoch; the connector state (e.g. a mean-std filter) keeps updating as the
        data streams, as in RLlib."""
        B = self.config.train_batch_size_per_learner
        per_read = self.config.input_read_batch_size or 16
        buf: dict | None = None
        epoch = 0
        while True:
            seen = 0
            for chunk in _chunks(self._episode_stream(epoch), per_read):
                seen += len(chunk)
                if self._stream_cstate is None:
                    self._stream_cstate = self.state.connector_state
                cols, self._stream_cstate = self._columns(chunk, self._stream_cstate, fit=True)
                buf = cols if buf is None else jax.tree_util.tree_map(
                    lambda a, b: np.concatenate([a, b]), buf, cols)
                while len(buf["actions"]) >= B:
                    yield jax.tree_util.tree_map(lambda x: x[:B], buf)
                    buf = jax.tree_util.tree_map(lambda x: x[B:], buf)
            if not seen:
                raise ValueError(f"no episodes found in {self.config.input_!r}")
            epoch += 1

    # ------------------------------------------------------------------ training

    def train(self) -> dict:
        """One training iteration; returns RLlib-style metrics."""
        t0 = time.perf_counter()
        if self._data is None and self._stream is None:
            self.load_data()
        n = self.config.num_updates_per_iteration
        t_upd = time.perf_counter()
        if self._data is not None:
            if self._scan is None:
                self._scan = self.dp.scan_on_device(n)
            self.state, metrics = self._scan(self.state, self._data)
        else:
            self.state, metrics = self.dp.stream_updates(self.state, self._stream, n)
            # The connector state fitted on the streamed data so far (batches run ahead of the
            # updates by the prefetch depth).
            self.state = self.state._replace(
                connector_state=self.dp.put_replicated(self._stream_cstate))
        metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
        update_s = time.perf_counter() - t_upd
        self.iteration += 1
        steps = n * self.config.train_batch_size_per_learner
        learner = {**metrics, "num_module_steps_trained": steps,
                   "num_module_steps_trained_lifetime": steps * self.iteration}
        result = {
            "training_iteration": self.iteration,
            "learners": {MODULE_ID: learner, "__all_modules__": {
                "num_env_steps_trained": steps,
                "num_env_steps_trained_lifetime": steps * self.iteration,
                "learner_update_timer": update_s / n}},
            "num_devices": len(self.devices),
        }
        interval = self.config.evaluation_interval
        if interval and self.iteration % interval == 0:
            result["evaluation"] = {"env_runners": self.evaluate()}
        result["time_this_iter_s"] = time.perf_counter() - t0
        self.history.append(result)
        return result

    # ------------------------------------------------------------------ acting

    def _e2m_state(self):
        """The env-to-module state: the learner's fitted state for the shared custom pieces."""
        fresh = self.env_to_module_connector.init(self.spaces)
        learned = jax.device_get(self.state.connector_state)
        return tuple(learned[:self._n_shared]) + tuple(fresh[self._n_shared:])

    def actor(self, explore: bool | None = None):
        """A `ConnectorPolicy` with the current params (for `EnvRunner`)."""
        from rljax_offline.runners.acting import ConnectorPolicy

        explore = self.config.evaluation_explore if explore is None else explore
        if self._actor is None or self._actor.explore != explore:
            self._actor = ConnectorPolicy(
                self.policy, None, self.spaces, self.env_to_module_connector, None,
                self.module_to_env_connector, lookback=self.config.episode_lookback_horizon,
                explore=explore)
        self._actor.params = jax.device_get(self.state.params)
        self._actor.e2m_state = self._e2m_state()
        return self._actor

    def compute_actions(self, obs: np.ndarray, explore: bool = False) -> np.ndarray:
        """Actions for a batch of raw env observations (pipelines that read only the latest
        observation); for lookback pipelines use `EnvRunner(env, algo.actor())`."""
        from rljax_offline.episode_builder import EpisodeBuilder

        builders = []
        for o in obs:
            b = EpisodeBuilder(observation_space=self.spaces.observation)
            b.add_env_reset(o)
            builders.append(b)
        return self.actor(explore).act(builders, self.config.seed)[0]

    def evaluate(self, num_episodes: int | None = None) -> dict:
        """Runs the policy in the env; RLlib's `env_runners` metrics."""
        from rljax_offline.runners.env_runner import EnvRunner, episode_stats

        n = num_episodes or self.config.evaluation_duration
        actor = self.actor()
        if self._runner is None:
            self._runner = EnvRunner(self.config.env, actor,
                                     num_envs=min(self.config.evaluation_num_envs, n),
                                     seed=self.config.seed + 10_000,
                                     env_config=self.config.env_config)
        self._runner.policy = actor
        self._runner.seed = self.config.seed + 10_000 + 1_000 * self.iteration
        t0 = time.perf_counter()
        stats = episode_stats(self._runner.sample(num_episodes=n))
        stats["evaluation_time_s"] = time.perf_counter() - t0
        return stats

    def export_policy(self, path: str, format: str = "stablehlo") -> str:
        """Writes the greedy policy, pipelines inlined, as one graph (`rljax_offline.export`)."""
        from rljax_offline.export import PolicyParts, export_policy

        return export_policy(PolicyParts(
            self.policy.apply, self.policy.dist.greedy, jax.device_get(self.state.params),
            self.env_to_module_connector, self._e2m_state(), self.module_to_env_connector,
            self.spaces, self.config.episode_lookback_horizon), path, format)

    # ------------------------------------------------------------------ checkpoints

    def save(self, path: str) -> str:
        meta = {"format": 1, "config": self.config.to_dict(), "iteration": self.iteration,
                "history": self.history}
        return ckpt.save_checkpoint(path, self.state, meta)

    def restore(self, path: str) -> None:
        """Loads a checkpoint of this algorithm; training continues exactly where it was."""
        meta = ckpt.load_meta(path)
        self.state = self.dp.put_replicated(ckpt.load_state(path, self.state))
        self._stream_cstate = None
        self.iteration = int(meta["iteration"])
        self.history = list(meta.get("history", []))

    @classmethod
    def from_checkpoint(cls, path: str, config: BCConfig | None = None) -> BC:
        """Rebuilds the algorithm from a checkpoint (its saved config unless one is given)."""
        if config is None:
            saved = ckpt.load_meta(path)["config"]
            if saved.get("learner_connector") or saved.get("env_to_module_connector"):
                raise ValueError("this checkpoint was trained with custom connector pieces: "
                                 "pass the same config to BC.from_checkpoint(path, config)")
            fields = {k: v for k, v in saved.items() if k in BCConfig.__dataclass_fields__
                      and k not in ("learner_connector", "env_to_module_connector",
                                    "input_filesystem")}
            config = BCConfig(**fields)
        algo = cls(config)
        algo.restore(path)
        return algo

    def stop(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None
