"""TD3+BC (Fujimoto & Gu 2021, "A Minimalist Approach to Offline Reinforcement Learning").

TD3 with one term added to the actor's loss: behavior cloning towards the data's actions.

* critic (`critic`): twin Q networks regress
  `r + gamma * (1 - terminated) * min_k Q_target_k(s', a')`, where `a'` is the target actor's
  action at `s'` plus Gaussian noise of `target_smoothing_sigma`, the noise clipped to
  `+-target_smoothing_clip` and the sum to the bounds (target policy smoothing);
* actor (`actor`), every `update_actor_interval`-th update only (its networks and optimizer
  state stay exactly as they are on the other updates): `-lambda * Q_1(s, pi(s)) +
  mean_d (pi(s) - a)^2`, with `lambda = alpha / mean|Q_1(s, pi(s))|` over the global batch
  (all devices) and held constant in the gradient, so the Q term's scale does not depend on
  the reward scale;
* the targets of both follow with Polyak weight `tau` on the actor's updates.

Actions, the smoothing noise and the BC distance live in the unit box: `[-1, 1]` scaled to
the Box bounds (as d3rlpy's `MinMaxActionScaler` at the env's bounds), so `sigma` and `clip` are
fractions of the half-range. The actor is deterministic: `tanh` scaled to the bounds.

Actions of the data outside the Box bounds (RLlib records its Gaussian policies' unclipped
samples) are clipped to the bounds in the learner pipeline (`clip_actions_inside_bounds` with no
margin), so the BC term pulls towards an action the actor can take and the critic sees the
action the env applied (gymnasium's Box envs clip).

Observation normalization (`normalize_observations`, the paper's): each observation becomes
`(s - mean) / (std + 1e-6)` with the mean and std of the data set's observations, a
`mean_std_filter` in front of the learner pipeline, fitted on the whole data set before the
learner columns are made (streamed data: on the chunks read so far); the env-to-module pipeline
shares the piece and its fitted state, so acting and export normalize the same way.

Defaults are d3rlpy 2.8's `TD3PlusBCConfig` (RLlib has no TD3+BC), under its names:
`alpha=2.5`, `target_smoothing_sigma=0.2` and `target_smoothing_clip=0.5` (the paper's
`policy_noise` and `noise_clip`), `update_actor_interval=2` (`policy_freq`), `tau=0.005`,
`gamma=0.99`, learning rates 3e-4, batch 256, two critics, 256-256 ReLU networks whose layers
start from PyTorch's `nn.Linear` draw (kernel and bias uniform in +-1/sqrt(fan_in); the
`model_config` initializers at "torch_default"), the draw the paper's code, d3rlpy and CORL
tuned these settings with. With flax's LeCun-normal draw, ours and d3rlpy's alike end 220-250
lower on `pendulum-mixed` after 20,000 updates (README, "Parity with d3rlpy at
convergence"); `rl_module(model_config={k: None for k in TORCH_DEFAULT})` gives it back. Box
actions only; no recurrent form.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rljax_offline import spaces as sp
from rljax_offline.algorithms.actor_critic_parts import (
    clipped_q_data,
    critic_and_actor,
    td_regression,
    td_target,
    unit_box,
)
from rljax_offline.algorithms.config import AlgorithmConfig, ConfigError
from rljax_offline.algorithms.options import (
    boolean,
    dict_or_none,
    non_negative_float,
    option,
    optional,
    positive_float,
    positive_int,
    unit_interval_open_left,
)
from rljax_offline.connectors.mean_std import mean_std_filter
from rljax_offline.learning.losses import per_example_normal
from rljax_offline.learning.spec import ActingSpec, AlgorithmSpec, DataSpec, LearningSpec
from rljax_offline.models.actor_and_q import check_bounded, q_ensemble
from rljax_offline.models.distributions import deterministic
from rljax_offline.models.initializers import TORCH_DEFAULT
from rljax_offline.models.networks import mlp_network
from rljax_offline.models.policy import is_recurrent


@dataclasses.dataclass(frozen=True)
class DeterministicActorConfig(AlgorithmConfig):
    """What TD3+BC and ReBRAC share around their losses: a deterministic tanh actor on
    bounded Box actions, their own actor and critic rates (no `lr`), no recurrent form, and
    the data set's mean-std normalization of observations (`normalize_observations`, a field
    of each subclass), fitted on the data and shared by learning and acting; and TD3's
    target smoothing, delayed actor and Polyak targets, whose options (declared here, at the
    paper's defaults) `td3_parts` and `td3_spec` read."""

    tau: float = option(5e-3, "training", unit_interval_open_left,
                        "Polyak weight of the target updates")
    target_smoothing_sigma: float = option(
        0.2, "training", non_negative_float,
        "std of the target action's noise, in units of the action half-range")
    target_smoothing_clip: float = option(0.5, "training", non_negative_float,
                                          "the target noise is clipped to +- this")
    update_actor_interval: int = option(
        2, "training", positive_int, "critic updates per actor (and target) update")

    def validate(self) -> None:
        super().validate()
        name = type(self).__name__
        if self.lr is not None:
            raise ConfigError(f"{name}: lr is not used; set actor_lr and critic_lr "
                              f"(got lr={self.lr!r})")
        if is_recurrent(self.model_config or {}):
            raise ConfigError(f"{name} has no recurrent form: drop use_lstm / use_gru")
        if self.normalize_observations and self.env_to_module_connector is not None:
            raise ConfigError(
                f"{name}: an env_to_module_connector replaces the normalizer that acting "
                "shares with learning: set normalize_observations=False and put a "
                "mean_std_filter in both pipelines yourself")

    def check_spaces(self, obs_spec, act_spec) -> None:
        name = type(self).__name__
        if not isinstance(act_spec, sp.BoxSpec):
            raise ConfigError(f"{name} needs Box actions (a deterministic actor), got "
                              f"{act_spec}")
        check_bounded(act_spec, name)

    def learner_connector_pieces(self, spaces) -> list:
        normalizer = ([mean_std_filter(clip=None, as_learner_connector=True)]
                      if self.normalize_observations else [])
        return [*normalizer, *super().learner_connector_pieces(spaces)]


@dataclasses.dataclass(frozen=True)
class TD3BCConfig(DeterministicActorConfig):
    """TD3+BC with d3rlpy's names and defaults (see the module docstring).

    Example:
        >>> from rljax_offline.algorithms.td3_bc import TD3BCConfig
        >>> algo = (TD3BCConfig().environment("Pendulum-v1")
        ...         .offline_data(input_="data/pendulum_mixed")
        ...         .training(alpha=2.5)).build()
        >>> result = algo.train()
    """

    algo_name = "td3_bc"

    lr: float | None = option(None, "training", optional(positive_float),
                              "unused: TD3+BC has actor_lr and critic_lr")
    train_batch_size_per_learner: int = option(256, "training", positive_int,
                                               "rows of one update, over all devices")
    actor_lr: float = option(3e-4, "training", positive_float, "learning rate of the actor")
    critic_lr: float = option(3e-4, "training", positive_float,
                              "learning rate of the Q networks")
    alpha: float = option(2.5, "training", non_negative_float,
                          "weight of Q against BC: lambda = alpha / mean|Q(s, pi(s))|")
    twin_q: bool = option(True, "training", boolean,
                          "two Q networks, their minimum in targets")
    normalize_observations: bool = option(
        True, "training", boolean,
        "normalize observations by the data set's mean and std (learning and acting)")
    model_config: dict = option(
        {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu", **TORCH_DEFAULT},
        "rl_module", dict_or_none,
        "RLlib's model-config keys; the layers start from PyTorch's draw (TD3+BC's own)")

    def make_spec(self, obs_spec, act_spec) -> AlgorithmSpec:
        parts = td3_parts(self, obs_spec, act_spec,
                          q_ensemble(obs_spec, act_spec, self.model_config, self.twin_q))
        q, gamma, alpha = parts.q, self.gamma, self.alpha

        def critic_loss(params, batch, rng, axis):
            next_q = jnp.min(q.apply(params["target_q"], batch["new_obs"],
                                     parts.env_action(parts.next_unit(params, batch, rng))),
                             axis=0)
            return td_regression(q, params, batch, td_target(batch, next_q, gamma))

        def actor_loss(params, batch, rng, axis):
            unit = parts.unit_action(params["policy"], batch["obs"])
            q1 = q.apply(params["q"], batch["obs"], parts.env_action(unit))[0]
            lam = alpha / jax.lax.stop_gradient(
                jnp.maximum(axis.mean(jnp.abs(q1), batch["loss_mask"]), 1e-6))
            bc = jnp.mean((unit - parts.to_unit(batch["actions"])) ** 2, axis=-1)
            loss = -lam * q1 + bc
            return loss, {"policy_loss": loss, "bc_loss": bc, "q_lambda": lam}

        return td3_spec(self, parts, critic_loss, actor_loss, clipped_q_data(margin=0.0))


class TD3Parts(NamedTuple):
    """What a TD3-style learner (TD3+BC, ReBRAC) builds its losses from: the deterministic
    actor (`policy`: its raw outputs; `unit_action`: their tanh, in the unit box), the Q
    ensemble, the unit box's maps (`to_unit`; `env_action`: unit actions `[N, dim]` in the
    env's shape and bounds), `next_unit`: the target actor's smoothed action at `new_obs`, and
    the action space's spec."""

    policy: Any
    q: Any
    to_unit: Callable
    unit_action: Callable
    env_action: Callable
    next_unit: Callable
    act_spec: Any


def td3_parts(config: DeterministicActorConfig, obs_spec, act_spec, q) -> TD3Parts:
    """The parts of a TD3-style learner for `config` (the spaces checked first) with the Q
    ensemble `q`. The next action is the target actor's plus Gaussian noise of
    `target_smoothing_sigma` clipped to `+-target_smoothing_clip`, the sum clipped to the
    unit box (target policy smoothing)."""
    config.check_spaces(obs_spec, act_spec)
    dim = sp.flat_dim(act_spec)
    policy = mlp_network(obs_spec, dim, config.model_config)
    to_unit, env_action = unit_box(act_spec)
    sigma, noise_clip = config.target_smoothing_sigma, config.target_smoothing_clip

    def unit_action(policy_params, obs):
        return jnp.tanh(policy.apply(policy_params, obs))  # [N, dim] in [-1, 1]

    def next_unit(params, batch, rng):
        noise = jnp.clip(sigma * per_example_normal(rng, (dim,)), -noise_clip, noise_clip)
        return jnp.clip(unit_action(params["target_policy"], batch["new_obs"]) + noise,
                        -1.0, 1.0)

    return TD3Parts(policy, q, to_unit, unit_action, env_action, next_unit, act_spec)


def td3_spec(config: DeterministicActorConfig, parts: TD3Parts, critic_loss: Callable,
             actor_loss: Callable, data: DataSpec) -> AlgorithmSpec:
    """A TD3-style learner's spec from its two losses: the critic on every update; the actor,
    and the targets of both (Polyak `tau`), on every `update_actor_interval`-th; acting with
    the deterministic actor."""
    policy, q = parts.policy, parts.q

    def init(rng):
        k1, k2 = jax.random.split(rng)
        return {"policy": policy.init(k1), "q": q.init(k2)}

    learning = LearningSpec(
        init=init,
        losses=critic_and_actor(config, critic_loss, actor_loss,
                                every=config.update_actor_interval),
        targets={"target_policy": "policy", "target_q": "q"}, tau=config.tau,
        target_update_period=config.update_actor_interval)
    acting = ActingSpec(act=lambda params, obs: policy.apply(params["policy"], obs),
                        dist=deterministic(parts.act_spec))
    return AlgorithmSpec(learning, acting, data)
