"""What an algorithm is, as data: the spec types the engine, acting and data reading take.

An algorithm's config turns itself into an `AlgorithmSpec` (`AlgorithmConfig.make_spec`),
three honest parts, each read by the code that needs it and nothing else:

* `LearningSpec`: what the engine steps (networks to init, `Loss`es, Polyak targets, the
  on-device `prepare`); `DataParallel`, `make_update` and `init_state` take only this;
* `ActingSpec`: what acting and export run (`act`, its distribution, a recurrent policy);
* `DataSpec`: what the learner pipeline must make (columns, the algorithm's pieces).

The engine's state is one `TrainState` pytree, saved whole in checkpoints.

The device axis is explicit: every loss and `prepare` receives, as its last argument, the
`BatchAxis` of the update (`learning.update`): `axis.sum(x)` and `axis.mean(x, mask)` reduce
over the global batch, every device's rows, whatever the sharding (under plain jit on one
device they are the plain sum and mean). Nothing else reduces over devices.

Example (a complete BC spec):
    >>> policy = make_policy(obs_spec, act_spec)
    >>> def nll(params, batch, rng, axis):
    ...     inputs = policy.dist_inputs(params["policy"], batch)
    ...     return -policy.dist.logp(inputs, batch["actions"]), {}
    >>> spec = AlgorithmSpec(
    ...     learning=LearningSpec(init=lambda rng: {"policy": policy.init(rng)},
    ...                           losses=(Loss("default_optimizer", ("policy",), nll,
    ...                                        optax.adam(1e-3)),)),
    ...     acting=ActingSpec(act=lambda p, obs: policy.apply(p["policy"], obs),
    ...                       dist=policy.dist),
    ...     data=DataSpec(columns=("obs", "actions")))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import optax


class TrainState(NamedTuple):
    """Everything an update reads and writes: a pytree, saved whole in checkpoints.

    Attributes:
      params: network name (`policy`, `value`, `q`, `target_q`, ...) -> its params.
      opt_states: each `Loss.name` -> its optax state.
      step: the number of updates made.
      rng: the key the next update splits.
      connector_state: the learner pipeline's state (a fitted mean-std filter, ...).
      extra: algorithm statistics that change without gradients (MARWIL's moving average
        of squared advantages).
    """

    params: dict
    opt_states: dict
    step: jax.Array
    rng: jax.Array
    connector_state: Any = ()
    extra: dict = {}  # noqa: RUF012 - NamedTuple defaults are never mutated here


class Loss(NamedTuple):
    """One optimized group: `fn(params, batch, rng, axis) -> (per_example_loss [N], metrics)`.

    `params` is the full dict (targets included); gradients flow only into `networks`.
    `axis` is the update's `BatchAxis`: `axis.mean(x, mask)` where a loss needs a statistic
    of the global batch (TD3+BC's `lambda`), never a per-device one.
    `metrics` values are per-example `[N]` arrays (reduced like the loss) or device-invariant
    scalars. `rng` holds one key per example, `[N, 2]`. Sequence batches (recurrent
    policies: `loss_mask` `[B, T]`) have one example per timestep: values `[B, T]` or `[B * T]`,
    keys `[B, T, 2]`.

    Attributes:
      name: the group's name (its optimizer state's key in `TrainState.opt_states`).
      networks: the names of the networks its gradients update.
      fn: `(params, batch, rng, axis) -> (per_example_loss, metrics)`.
      optimizer: its optax `GradientTransformation`.
      every: the optimizer steps only on updates whose count is a multiple of it (TD3's
        delayed policy updates); in between its networks and optimizer state are left
        exactly as they are.
    """

    name: str
    networks: tuple[str, ...]
    fn: Callable
    optimizer: optax.GradientTransformation
    every: int = 1


class LearningSpec(NamedTuple):
    """What the engine steps, as pure functions.

    Attributes:
      init: `rng -> params` of the online networks; targets are copied from them.
      losses: the optimized groups (`Loss`), applied in order (a later loss sees the params
        the earlier ones produced, as SAC-style learners do).
      targets: target name -> online name, updated `t <- tau * online + (1 - tau) * t` every
        `target_update_period` updates (tau 1: a hard copy).
      tau: the Polyak rate, in (0, 1].
      target_update_period: updates between target updates.
      prepare: `(params, extra, batch, rng, axis) -> (batch, extra)`, on the device before
        the losses: columns that need the current networks (MARWIL's advantages), statistics
        over the global batch through `axis` (MARWIL's `axis.mean(adv**2, mask)`).
      extra_init: the initial `TrainState.extra`.
    """

    init: Callable
    losses: tuple
    targets: dict = {}  # noqa: RUF012
    tau: float = 1.0
    target_update_period: int = 1
    prepare: Callable | None = None
    extra_init: dict = {}  # noqa: RUF012


class ActingSpec(NamedTuple):
    """What acting (`ActorPolicy`, `EnvRunner`) and export run of an algorithm.

    Attributes:
      act: `(params, obs [N, ...]) -> action_dist_inputs [N, d]`, on all the params; with
        `takes_key`, `(params, key, obs)`: a policy that draws when it acts (K candidate
        actions, an ensemble member) reads its randomness from `key`, never from Python.
      dist: the distribution of `act`'s output (`greedy`, `sample`, `logp`, `entropy`).
      policy: the `models.policy.Policy` that `act` runs on `params[policy_network]`, where
        the algorithm acts through one (acting needs it for recurrent policies' state; a
        recurrent one makes the data sequences, its `state_in` rides in the batch).
      policy_network: the params entry `policy` runs on (`"q"` for a Q-greedy policy;
        None: all the params, for a module of several networks such as PPO's recurrent
        actor-critic, whose state holds both networks' states).
      takes_key: whether `act` takes a random key (see `act`). The actor passes a fresh key
        each step (greedy acting too: the draw is part of the policy, not exploration),
        greedy export a fixed one (`jax.random.PRNGKey(0)` split per step), off-policy
        evaluation one from its seed.
    """

    act: Callable
    dist: Any
    policy: Any = None
    policy_network: str | None = "policy"
    takes_key: bool = False

    def act_with_key(self, params: Any, key: jax.Array, obs: Any) -> jax.Array:
        """The acting seam, one signature for every policy: `(params, key, obs) ->
        action_dist_inputs`; the key is unused where `act` takes none."""
        return self.act(params, key, obs) if self.takes_key else self.act(params, obs)

    @property
    def is_stateful(self) -> bool:
        """Whether acting carries a recurrent state from step to step."""
        return bool(self.policy is not None and self.policy.is_stateful)


class DataSpec(NamedTuple):
    """What the learner pipeline must make for the losses.

    Attributes:
      columns: the learner-pipeline columns the losses read (kept when data is materialized).
      learner_connector: pieces the algorithm appends to the default learner pipeline.
      sequence_connector: pieces appended after the time dimension is added (recurrent
        policies only; columns per sequence, e.g. MARWIL's bootstrap window).
      windows: the losses read context windows and no recurrent state (a transformer), so
        the learner may cut them anywhere in an episode (`sample_unit="windows"`).
    """

    columns: tuple = ("obs", "actions")
    learner_connector: tuple = ()
    sequence_connector: tuple = ()
    windows: bool = False


class AlgorithmSpec(NamedTuple):
    """An algorithm as its config builds it for given spaces.

    Attributes:
      learning: what the learner core steps (`LearningSpec`).
      acting: how the trained policy acts and exports (`ActingSpec`); None where nothing
        acts (PPO's value warm-up).
      data: what the learner pipeline must make (`DataSpec`).
    """

    learning: LearningSpec
    acting: ActingSpec | None
    data: DataSpec = DataSpec()
