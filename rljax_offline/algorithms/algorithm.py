"""`Algorithm`: any registered algorithm, built from its config.

The algorithm is the same for BC, MARWIL, CQL, IQL and the user's own: its config supplies an
`AlgorithmSpec` (networks and losses, acting, data), the learner core trains it
data-parallel, and this class is a thin facade over the parts around it, one concern each:

* `algorithms.pipelines`: the learner, env-to-module and module-to-env connector pipelines
  (and the learner columns the data keeps, recurrent sequences included);
* `algorithms.offline_data`: reading the data, the learner columns, materialized on the
  devices or streamed with a resumable cursor;
* `algorithms.data_sources`: the data source each iteration's updates take their data from
  (materialized, streamed; online algorithms: rollouts, a replay buffer): `train()` is the
  one loop over it for every algorithm;
* `algorithms.checkpointing`: `save()`, `restore()` and `Algorithm.from_checkpoint`, the
  stream cursor included; resume is exact.

`train()` runs one iteration (offline: `num_updates_per_iteration` updates, or RLlib's
`dataset_num_iters_per_learner`, in one jitted `lax.scan` over all selected devices) and
returns RLlib-style metrics; `evaluate()` runs the greedy policy in the env.

Recurrent policies (`model_config` with `use_lstm` or `use_gru`): the rows kept on the devices
(or streamed) are `max_seq_len` sequences (see `algorithms.pipelines`), and each update samples
`train_batch_size_per_learner / max_seq_len` of them (rounded to a multiple of the device
count), about `train_batch_size_per_learner` timesteps, as RLlib does. Acting carries the
state from step to step (`state_out` recorded per step, the next step's `state_in`). A
transformer sampled in windows (`sample_unit="windows"`) keeps flat rows and samples as many
windows of `max_seq_len` steps, each ending at any step.

Process-wide setup (joining `jax.distributed`, the compilation cache) is not done here: the
config's `build()` does it first (`runtime.setup`).
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import jax
import numpy as np

from rljax_offline.acting.actor import actor_for
from rljax_offline.acting.episode_output import EpisodeOutput
from rljax_offline.acting.evaluator import Evaluator
from rljax_offline.algorithms import checkpointing, pipelines
from rljax_offline.algorithms.config import AlgorithmConfig, ConfigError
from rljax_offline.algorithms.data_sources import Materialized, Streamed
from rljax_offline.algorithms.offline_data import OfflineData
from rljax_offline.connectors import Spaces
from rljax_offline.data.device import DeviceData
from rljax_offline.export import export_policy, policy_parts
from rljax_offline.learning.data_parallel import DataParallel, select_devices
from rljax_offline.learning.learner import Learner
from rljax_offline.learning.spec import AlgorithmSpec, TrainState
from rljax_offline.learning.trained_policy import TrainedPolicy, env_spaces, make_policy
from rljax_offline.ope.evaluation import evaluate_policy
from rljax_offline.ope.methods import parse_methods
from rljax_offline.runtime.background import Background
from rljax_offline.runtime.setup import ProcessSetup

CHECKPOINT_FORMAT = checkpointing.CHECKPOINT_FORMAT
STREAM_FILE = checkpointing.STREAM_FILE


class Algorithm:
    """An algorithm (see the module docstring). Build with `SomeConfig().build()`: it returns
    while the init program compiles on a background thread (an internal detail of building
    the state: `state` waits for it), so reading the data overlaps that compile."""

    def __init__(self, config: AlgorithmConfig, process: ProcessSetup | None = None):
        config.validate()
        self.config = config
        process = process or ProcessSetup.current()
        self.multi_process = process.multi_process
        self.compilation_cache_dir = process.compilation_cache_dir
        self._obs_space, self._act_space = self._gym_spaces()
        self.spaces = Spaces.of(self._obs_space, self._act_space)
        config.check_spaces(self.spaces.observation, self.spaces.action)
        self.spec: AlgorithmSpec
        self.spec, self.pipelines = pipelines.build(config, self.spaces)
        self.is_stateful = self.spec.acting.is_stateful
        self.devices = select_devices(config.num_devices)
        self.rows_per_update = self._rows_for(config.update_batch_size)
        self._initial_connector_state = self.learner_connector.init(self.spaces)
        # the train state and the data-parallel runtime (its init compiles meanwhile)
        self.learner = Learner(self.spec.learning, self.devices, self.rows_per_update,
                               mode=config.update_mode, seed=config.seed,
                               connector_state=self._initial_connector_state)
        self.data = OfflineData(config, self.spaces, (self._obs_space, self._act_space),
                                self.pipelines, self.dp, self.multi_process)
        self.source = self.make_source()
        self.iteration = 0
        self.history: list[dict] = []
        self._restored = False
        self._actor = None
        self._acting_started = False
        self._compute_calls = 0  # compute_actions' calls: each draws with its own key
        self._outputs: dict[str, EpisodeOutput] = {}
        self.evaluator = Evaluator(config.env, env_config=config.env_config,
                                   max_envs=config.evaluation_num_envs, seed=config.seed,
                                   on_episodes=lambda episodes: self.record("evaluation",
                                                                            episodes))
        self.timers: dict[str, float] = {}

    def _gym_spaces(self) -> tuple:
        """`(observation_space, action_space)` of what the module sees: the config's env's
        (a multi-agent algorithm's: its module's agents')."""
        return env_spaces(self.config)

    @property
    def learner_connector(self):
        return self.pipelines.learner

    @property
    def env_to_module_connector(self):
        return self.pipelines.env_to_module

    @property
    def module_to_env_connector(self):
        return self.pipelines.module_to_env

    @property
    def state(self) -> TrainState:
        """Every network, optimizer state, RNG and connector state (`TrainState`), replicated
        on the devices (owned by `learner`). The first use waits for the init program that
        `build()` left compiling in the background, and raises its error if it failed."""
        return self.learner.state

    @state.setter
    def state(self, state: TrainState) -> None:
        self.learner.state = state

    @property
    def dp(self) -> DataParallel:
        """The data-parallel runtime (owned by `learner`)."""
        return self.learner.dp

    @property
    def _connector_state(self) -> Any:
        """The learner connector state, without waiting for a pending init program."""
        return self.learner.connector_state

    @property
    def algo_name(self) -> str:
        return self.config.algo_name

    def _rows_for(self, size: int) -> int:
        """Rows holding `size` timesteps: as many, or for a recurrent policy that many
        timesteps in sequences of `max_seq_len` (RLlib's batch of sequences), rounded to a
        multiple of the device count."""
        if not self.is_stateful:
            return size
        n = len(self.devices)
        seqs = size / self.spec.acting.policy.max_seq_len
        return max(n, int(round(seqs / n)) * n)

    @property
    def sample_window(self) -> int | None:
        """Steps of the context windows the learner cuts as it samples
        (`sample_unit="windows"`: the sequence model's `max_seq_len`); None otherwise."""
        if self.config.sample_unit != "windows":
            return None
        return self.spec.acting.policy.max_seq_len

    @property
    def timesteps_per_update(self) -> int:
        """Timesteps one update trains on (for a recurrent policy: sequences times
        `max_seq_len`, zero padding included)."""
        if self.is_stateful:
            return self.rows_per_update * self.spec.acting.policy.max_seq_len
        return self.rows_per_update

    # ------------------------------------------------------------------ data

    @property
    def _data(self) -> DeviceData | None:
        return self.data.device_data

    @property
    def num_timesteps(self) -> int:
        return self.data.num_timesteps

    @property
    def num_episodes(self) -> int:
        return self.data.num_episodes

    def load_data(self) -> None:
        """Reads the data (RLlib does this in the first iteration); called by `train()`."""
        if self.config.input_ is None:
            raise ConfigError("no offline data: set config.offline_data(input_=...)")
        t0 = time.perf_counter()
        if not self.config.streams_data:
            cstate = self.data.materialize(self._connector_state, fit=not self._restored)
            self.state = self.dp.put_replicated(self.state._replace(connector_state=cstate))
        else:
            self.data.start_stream(self._connector_state)
        self.timers["data_load_s"] = time.perf_counter() - t0

    # ------------------------------------------------------------------ training

    def make_source(self) -> Any:
        """The data source (`algorithms.data_sources`): the offline data materialized on the
        devices or streamed; an online algorithm's rollouts or replay buffer."""
        return Streamed(self.data) if self.config.streams_data else Materialized(self.data)

    def train(self) -> dict:
        """One training iteration, the same for every algorithm: the data source samples
        (offline: the data is read on the first call), runs the updates and says what it did;
        returns RLlib-style metrics."""
        t0 = time.perf_counter()
        chunks, finished = self.source.sample(self)
        sample_s = time.perf_counter() - t0
        steps = self.sampled_env_steps(chunks, finished)
        t_upd = time.perf_counter()
        # What acting needs of the state is taken before the updates donate its buffers;
        # the acting step then compiles in the background while the updates run.
        acting, preparing = self._acting_inputs(), None
        try:
            learners, fields, n = self.source.update(self, chunks, steps)
            if acting is not None:
                preparing = Background(self._compiled_actor, *acting)
            learners = {m: {k: v if isinstance(v, int) else float(v)
                            for k, v in jax.device_get(values).items()}
                        for m, values in learners.items()}
        finally:
            if preparing is not None:
                self._keep_compiled_actor(preparing)
        learners["__all_modules__"]["learner_update_timer"] = (
            (time.perf_counter() - t_upd) / max(n, 1))
        sampled = self._sampling_result(steps, finished, sample_s)
        self.iteration += 1
        result = {"training_iteration": self.iteration, "algorithm": self.algo_name,
                  **sampled, "learners": learners, "num_devices": len(self.devices),
                  **fields}
        return self._end_iteration(result, t0)

    def sampled_env_steps(self, chunks: list, finished: list) -> int:
        """Env steps an iteration's rollout took: its chunks' steps (offline: none)."""
        return sum(len(ep) for ep in chunks)

    def _sampling_result(self, steps: int, finished: list, sample_s: float) -> dict:
        """What the result says of the iteration's env sampling: offline, nothing."""
        return {}

    def _end_iteration(self, result: dict, t0: float) -> dict:
        """An iteration's `result` (begun at `t0`) completed: an evaluation at
        `evaluation_interval`, the iteration's time; it joins `history`."""
        interval = self.config.evaluation_interval
        if interval and self.iteration % interval == 0:
            result["evaluation"] = self._evaluation()
        result["time_this_iter_s"] = time.perf_counter() - t0
        self.history.append(result)
        return result

    def _evaluation(self) -> dict:
        """An evaluation's results: the env runners' returns, and off-policy estimates on the
        held-out episodes where `off_policy_estimation_methods` asks for them."""
        evaluation = {"env_runners": self.evaluate()}
        if self.config.off_policy_estimation_methods:
            evaluation["off_policy_estimator"] = self.estimate_off_policy()
        return evaluation

    # ------------------------------------------------------------------ acting

    def _acting_inputs(self) -> tuple | None:
        """On the first offline iteration of a process, what compiling the evaluation actor's
        step needs (`_compiled_actor`'s arguments): zero params of the right shapes, the
        fitted env-to-module state and observations shaped like `evaluate()`'s envs'. None
        when an actor exists already, or online (the first iteration samples with the
        exploring actor instead)."""
        if self._actor is not None or self._acting_started or self.config.trains_online:
            return None
        self._acting_started = True
        try:
            params = jax.tree_util.tree_map(lambda x: np.zeros(x.shape, x.dtype),
                                            self.state.params)
            num_envs = min(self.config.evaluation_num_envs, self.config.evaluation_duration)
            obs = gym.vector.utils.create_empty_array(self._obs_space, num_envs)
            return self.config.evaluation_explore, params, self._e2m_state(), obs
        except Exception:  # noqa: BLE001 - as in _keep_compiled_actor: acting raises its own
            return None

    def _compiled_actor(self, explore: bool, params: Any, e2m_state: Any, obs: Any):
        """A new actor whose step is compiled for envs observing a batch like `obs` (run on a
        background thread while the first updates run, so the first evaluation acts at
        once)."""
        actor = self._new_actor(explore)
        actor.params, actor.e2m_state = params, e2m_state
        actor.compile(obs)
        return actor

    def _keep_compiled_actor(self, acting: Background) -> None:
        """Keeps the actor compiled in the background. If preparing it failed, acting was
        going to fail too: `evaluate()` then builds its actor again and raises that error
        where it belongs, not in `train()`."""
        try:
            actor = acting.result()
        except Exception:  # noqa: BLE001 - acting's own errors are raised by acting
            return
        if self._actor is None:
            self._actor = actor

    def _e2m_state(self):
        """The env-to-module state: the learner's fitted state for each piece of the same
        name (`pipelines.env_to_module_state`), fresh for the others."""
        return pipelines.env_to_module_state(self.pipelines, self.spaces,
                                             self.state.connector_state)

    def policy(self) -> TrainedPolicy:
        """The current trained policy (`learning.trained_policy`): the acting spec, host
        copies of the params and the fitted connector state, and the pipelines; what the
        actor, export, off-policy evaluation and fine-tuning consume."""
        return make_policy(self.config, (self._obs_space, self._act_space), self.state.params,
                           self.state.connector_state, (self.spec, self.pipelines))

    def actor(self, explore: bool | None = None):
        """An `ActorPolicy` with the current params and env-to-module state (for
        `EnvRunner`; compiled once per explore flag and kept)."""
        explore = self.config.evaluation_explore if explore is None else explore
        if self._actor is None or self._actor.explore != explore:
            self._actor = self._new_actor(explore)
        return self._synced(self._actor)

    def _new_actor(self, explore: bool):
        """A new `ActorPolicy` of this algorithm's policy between its pipelines (each runner
        needs its own: an actor holds its envs' windows)."""
        return actor_for(self._policy_without_params(), explore)

    def _policy_without_params(self) -> TrainedPolicy:
        """`policy()` with no params and a fresh connector state (`_synced` sets both): an
        actor built before the init program has run."""
        return make_policy(self.config, (self._obs_space, self._act_space), None,
                           self._initial_connector_state, (self.spec, self.pipelines))

    def _synced(self, actor):
        """`actor` with the current params and fitted env-to-module state."""
        actor.params = jax.device_get(self.state.params)
        actor.e2m_state = self._e2m_state()
        return actor

    def compute_actions(self, obs: Any, explore: bool = False) -> np.ndarray:
        """Actions for a batch of raw env observations (`[N, ...]`, or a dict of them for Dict
        spaces), each taken as the first of its episode; to act over whole episodes (lookback
        pipelines, recurrent policies) use `EnvRunner(env, algo.actor())`. Each call draws
        with its own key (call `n` seeds `seed + n`), so a policy that draws when it acts
        (exploring, or BCQ's, BEAR's and CRR's candidate picks) called once a step draws
        afresh each step, as in an episode, not the same draw again."""
        actor = self.actor(explore)
        actor.reset(obs, (self.config.seed + self._compute_calls) % 2**31)
        self._compute_calls += 1
        return actor.select()[0]

    def evaluate(self, num_episodes: int | None = None) -> dict:
        """Runs the policy in the env; RLlib's `env_runners` metrics."""
        n = num_episodes or self.config.evaluation_duration
        return self.evaluator.evaluate(self.actor(), n, self.iteration)

    def record(self, group: str, episodes: list) -> None:
        """With `offline_data(output=...)`: the finished episodes among `episodes` (or the
        chunks they finish) to Parquet, one `EpisodeOutput` per env-runner group
        (`evaluation`, `sampled`); RLlib records what its env runners sample the same way."""
        if self.config.output is None:
            return
        if group not in self._outputs:
            self._outputs[group] = EpisodeOutput(self.config, group)
        self._outputs[group].add(episodes)

    @property
    def output_files(self) -> list[str]:
        """Every Parquet file `offline_data(output=...)` finished so far."""
        return [f for out in self._outputs.values() for f in out.files]

    def estimate_off_policy(self, episodes: list | None = None) -> dict:
        """Off-policy estimates of the current policy (`rljax_offline.ope`), by the config's
        `off_policy_estimation_methods`, on `episodes` (default: the `ope_split` episodes
        held out of training): `{name: {v_behavior, v_target, v_gain, ..., v_target_ci,
        ess}}`."""
        return evaluate_policy(self.policy(), self.data.ope_episodes if episodes is None
                               else episodes,
                               parse_methods(self.config.off_policy_estimation_methods))

    def export_policy(self, path: str, format: str = "stablehlo") -> str:
        """Writes one greedy acting step, pipelines inlined, as one graph, and its signature
        as `<path>.json` (`rljax_offline.export`): `act(obs)`, or for recurrent policies and
        pipelines that read past steps `step(inputs)` with the state and `t`."""
        return export_policy(policy_parts(self.policy()), path, format)

    # ------------------------------------------------------------------ checkpoints

    def save(self, path: str) -> str:
        """An atomic checkpoint of everything needed to resume exactly, the stream cursor
        of streamed data included (`algorithms.checkpointing`). In a multi-process run every
        process calls it and process 0 alone writes. Recording (`offline_data(output=...)`)
        finishes its open file first, so every episode recorded up to here is on disk."""
        for out in self._outputs.values():
            out.flush()
        return checkpointing.save(self, path, self.checkpoint_files())

    def checkpoint_files(self) -> dict[str, bytes]:
        """Files the data source adds to checkpoints (name -> bytes, read back with
        `learning.checkpoint.load_file`): none offline; SAC's replay buffer."""
        return self.source.checkpoint_files()

    def restore(self, path: str) -> None:
        """Loads a checkpoint of this algorithm; training continues exactly where it was."""
        checkpointing.restore(self, path)
        self.source.restore(self, path)
        self._restored = True

    def restore_from_path(self, path: str, component: str | None = None) -> None:
        """RLlib's `restore_from_path`: the whole checkpoint (`component=None`, as
        `restore`), or one component of it by RLlib's names (`rljax_offline.constants`):
        `COMPONENT_RL_MODULE` (the network weights: what recording with an expert needs),
        `COMPONENT_LEARNER` / `COMPONENT_LEARNER_GROUP` (weights, optimizer states and the
        learner connector's fitted state), `COMPONENT_ENV_TO_MODULE_CONNECTOR` /
        `COMPONENT_LEARNER_CONNECTOR` (the fitted connector state)."""
        if component is None:
            self.restore(path)
        else:
            checkpointing.restore_component(self, path, component)

    @classmethod
    def from_checkpoint(cls, path: str, config: AlgorithmConfig | None = None) -> Algorithm:
        """Rebuilds any registered algorithm from a checkpoint (its saved config unless one
        is given: needed when the run used custom connector pieces, which are code)."""
        return checkpointing.from_checkpoint(path, config)

    def stop(self) -> None:
        """Ends the prefetch thread of streamed data (keeping its cursor: a later `save()`
        or `train()` goes on from the last batch consumed), closes the evaluation envs and
        ends recording (`EpisodeOutput.close`: the last file written, unless
        `output_write_remaining_data=False`)."""
        self.source.stop()
        for out in self._outputs.values():
            out.close()
        self.evaluator.close()
