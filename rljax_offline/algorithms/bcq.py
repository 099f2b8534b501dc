"""BCQ (Fujimoto et al. 2019, "Off-Policy Deep Reinforcement Learning without Exploration"):
batch-constrained Q-learning for Box actions. A generative model of the data's actions
proposes candidates, a perturbation actor nudges each within `action_flexibility`, and the
critic picks the best, so neither the target nor the policy evaluates actions far from the
data.

In the unit box (actions scaled to `[-1, 1]` by the Box bounds, as d3rlpy's
`MinMaxActionScaler`), with `G` the conditional VAE (`algorithms.vae`) and
`xi(s, a) = clip(a + Phi * tanh(f(s, a)), -1, 1)` the perturbation actor, `Phi =
action_flexibility`:

* imitator (`imitator`): the VAE's loss `mean_d (D(s, z) - a)^2 + beta * mean_j KL(q(z|s, a)
  || N(0, I))`, `z ~ q(z|s, a)` reparameterised;
* critic (`critic`): the ensemble regresses
  `y = r + gamma * (1 - terminated) * max_i [lam * min_k Q'_k(s', a_i) + (1 - lam) * max_k
  Q'_k(s', a_i)]` over `n_action_samples` candidates `a_i = xi'(s', D(s', z_i))`,
  `z_i ~ clip(N(0, I), -0.5, 0.5)` (the target actor `xi'`, the current decoder);
* actor (`actor`): `-Q_1(s, xi(s, D(s, z)))`, one clipped latent per state;
* the targets of the critics and the actor follow with Polyak weight `tau` every update;
* acting: `n_action_samples` candidates `xi(s, D(s, z_i))` per state, drawn with the step's
  key (`ActingSpec.takes_key`), the one of highest `Q_1` taken.

For the first `rl_start_step` updates only the imitator learns: the critic's and the actor's
optimizers skip those updates (`during`: zero updates, their Adam state untouched, as
d3rlpy's skipped updates; their losses are still computed and reported).

Defaults are d3rlpy 2.8's `BCQConfig` under its names (RLlib has no BCQ): learning rates
1e-3 (`actor_lr`, `critic_lr`, `imitator_lr`), batch 100, `gamma=0.99`, `tau=0.005`,
`n_critics=2`, `lam=0.75`, `n_action_samples=100`, `action_flexibility=0.05`,
`rl_start_step=0`, `beta=0.5`, latent width twice the action's, log-std in [-4, 15], 256-256
ReLU networks from PyTorch's `nn.Linear` draw, and d3rlpy's decoder: its raw output, with no
tanh (d3rlpy 2.8's `VAEDecoder` skips it at its default `with_squash=True`), so only the
perturbation's clip keeps the candidates in the box. `squash_decoder=True` gives the paper's
tanh-squashed decoder, which trails d3rlpy's on the 6,000-transition `hopper-medium-replay`
set (docs/benchmarks/zoo-parity-20k.md). Box actions with finite bounds only; no recurrent
form.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from rljax_offline import spaces as sp
from rljax_offline.algorithms.actor_critic_base import ActorCriticBaseConfig
from rljax_offline.algorithms.actor_critic_parts import (
    clipped_q_data,
    critic_and_actor,
    mixed_min_max,
    td_regression,
    td_target,
    unit_box,
)
from rljax_offline.algorithms.config import AlgorithmConfig, ConfigError
from rljax_offline.algorithms.cql import repeat_rows, split_keys
from rljax_offline.algorithms.options import (
    boolean,
    non_negative_float,
    non_negative_int,
    option,
    optional,
    positive_float,
    positive_int,
    probability,
)
from rljax_offline.algorithms.vae import (
    ConditionedMLP,
    conditional_vae,
    conditioned_mlp,
    imitator_loss,
    sample_latent,
)
from rljax_offline.learning.optim import make_optimizer
from rljax_offline.learning.spec import ActingSpec, AlgorithmSpec, LearningSpec, Loss
from rljax_offline.models.actor_and_q import check_bounded
from rljax_offline.models.distributions import deterministic
from rljax_offline.models.networks import continuous_q_network, ensemble

__all__ = ["BCQConfig", "check_box", "perturbation_actor", "unit_to_dist_inputs"]

TANH_EDGE = 1e-6


def check_box(config: AlgorithmConfig, act_spec, hint: str = "") -> None:
    """Box actions with finite bounds (a generative model in the unit box), else a one-line
    error naming the config.

    Args:
      config: the algorithm's config (its class names the error).
      act_spec: the action space's spec.
      hint: what to use instead for Discrete actions (`"; for Discrete ..."`), if anything.
    """
    name = type(config).__name__
    if not isinstance(act_spec, sp.BoxSpec):
        raise ConfigError(f"{name} needs Box actions (a generative model of continuous "
                          f"actions){hint}, got {act_spec}")
    check_bounded(act_spec, name)


def perturbation_actor(obs_spec, dim: int, model_config: dict, phi: float) -> ConditionedMLP:
    """BCQ's perturbation actor `xi(s, a) = clip(a + phi * tanh(f(s, a)), -1, 1)` on unit-box
    actions `a` `[N, dim]` (d3rlpy's `DeterministicResidualPolicy`).

    Args:
      obs_spec: the observation space's spec.
      dim: the flat action width.
      model_config: the network's model config.
      phi: the perturbation's bound (`action_flexibility`).
    """
    net = conditioned_mlp(obs_spec, dim, dim, model_config)

    def apply(params, obs, unit):
        return jnp.clip(unit + phi * jnp.tanh(net.apply(params, obs, unit)), -1.0, 1.0)

    return ConditionedMLP(net.init, apply)


def unit_to_dist_inputs(unit: jax.Array) -> jax.Array:
    """Unit-box actions as the `deterministic` distribution's inputs (their arctanh, kept
    finite at the bounds), so its greedy action is the action itself.

    Args:
      unit: actions in `[-1, 1]`, `[N, d]`.
    """
    return jnp.arctanh(jnp.clip(unit, -1.0 + TANH_EDGE, 1.0 - TANH_EDGE))


@dataclasses.dataclass(frozen=True)
class BCQConfig(ActorCriticBaseConfig):
    """BCQ with d3rlpy's names and defaults (see the module docstring).

    Example:
        >>> from rljax_offline import BCQConfig
        >>> algo = (BCQConfig().environment("Pendulum-v1")
        ...         .offline_data(input_="data/pendulum_mixed")
        ...         .training(n_action_samples=10, num_updates_per_iteration=20)
        ...         .learners(num_devices=1)).build()  # batch 100 (d3rlpy's): not over 8
        >>> result = algo.train()
    """

    algo_name = "bcq"

    lr: float | None = option(None, "training", optional(positive_float),
                              "unused: BCQ has actor_lr, critic_lr and imitator_lr")
    train_batch_size_per_learner: int = option(100, "training", positive_int,
                                               "rows of one update, over all devices")
    actor_lr: float = option(1e-3, "training", positive_float,
                             "learning rate of the perturbation actor")
    critic_lr: float = option(1e-3, "training", positive_float,
                              "learning rate of the Q networks")
    imitator_lr: float = option(1e-3, "training", positive_float,
                                "learning rate of the VAE")
    n_critics: int = option(2, "training", positive_int,
                            "Q networks of the ensemble (lam mixes their min and max)")
    lam: float = option(0.75, "training", probability,
                        "target's weight of the critics' minimum against their maximum")
    n_action_samples: int = option(100, "training", positive_int,
                                   "candidate actions per state (target and acting)")
    action_flexibility: float = option(0.05, "training", non_negative_float,
                                       "the perturbation's bound, in units of the "
                                       "action half-range")
    beta: float = option(0.5, "training", non_negative_float,
                         "weight of the VAE's KL term")
    rl_start_step: int = option(0, "training", non_negative_int,
                                "updates of the VAE alone before the critic and actor learn")
    squash_decoder: bool = option(False, "training", boolean,
                                  "tanh on the VAE decoder's actions (the paper's); False: "
                                  "its raw output, as d3rlpy 2.8's")

    def check_spaces(self, obs_spec, act_spec) -> None:
        check_box(self, act_spec, "; for Discrete actions use DiscreteBCQConfig")

    def make_spec(self, obs_spec, act_spec) -> AlgorithmSpec:
        self.check_spaces(obs_spec, act_spec)
        dim = int(sp.flat_dim(act_spec))
        to_unit, env_action = unit_box(act_spec)
        vae = conditional_vae(obs_spec, dim, 2 * dim, self.model_config, self.squash_decoder)
        perturb = perturbation_actor(obs_spec, dim, self.model_config,
                                     self.action_flexibility)
        q = ensemble(continuous_q_network(obs_spec, act_spec, self.model_config),
                     self.n_critics)
        gamma, lam, n = self.gamma, self.lam, self.n_action_samples

        def candidates(params, policy_name, obs, keys):
            """`n` candidates per state: rows `[N * n]` of observations and unit actions."""
            obs_n = repeat_rows(obs, n)
            latent = sample_latent(split_keys(keys, n).reshape(-1, 2), vae.latent_dim)
            unit = vae.decode(params["vae"], obs_n, latent)
            return obs_n, perturb.apply(params[policy_name], obs_n, unit)

        def init(rng):
            k1, k2, k3 = jax.random.split(rng, 3)
            return {"policy": perturb.init(k1), "q": q.init(k2), "vae": vae.init(k3)}

        def critic_loss(params, batch, rng, axis):
            rows = batch["rewards"].shape[0]
            obs_n, unit = candidates(params, "target_policy", batch["new_obs"], rng)
            values = q.apply(params["target_q"], obs_n, env_action(unit)).reshape(-1, rows, n)
            next_q = jnp.max(mixed_min_max(values, lam), axis=-1)
            return td_regression(q, params, batch, td_target(batch, next_q, gamma))

        def actor_loss(params, batch, rng, axis):
            obs = batch["obs"]
            unit = vae.decode(params["vae"], obs, sample_latent(rng, vae.latent_dim))
            action = perturb.apply(params["policy"], obs, jax.lax.stop_gradient(unit))
            q1 = q.apply(params["q"], obs, env_action(action))[0]
            return -q1, {"policy_loss": -q1}

        def act(params, key, obs):
            rows = jax.tree_util.tree_leaves(obs)[0].shape[0]
            obs_n, unit = candidates(params, "policy", obs, jax.random.split(key, rows))
            values = q.apply(params["q"], obs_n, env_action(unit))[0].reshape(rows, n)
            best = jnp.argmax(values, axis=-1)
            chosen = unit.reshape(rows, n, dim)[jnp.arange(rows), best]
            return unit_to_dist_inputs(chosen)

        learning = LearningSpec(
            init=init,
            losses=(Loss("imitator", ("vae",), imitator_loss(vae, to_unit, self.beta),
                         make_optimizer(self.imitator_lr, self.grad_clip)),
                    *critic_and_actor(self, critic_loss, actor_loss, start=self.rl_start_step)),
            targets={"target_q": "q", "target_policy": "policy"}, tau=self.tau)
        acting = ActingSpec(act=act, dist=deterministic(act_spec), takes_key=True)
        return AlgorithmSpec(learning, acting, clipped_q_data(margin=0.0))
