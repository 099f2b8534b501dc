"""PLAS (Zhou et al. 2020, "PLAS: Latent Action Space for Offline Reinforcement Learning"):
the actor chooses a point of a generative model's latent space rather than an action, so
every action it takes is one the model of the data's actions decodes: the policy stays near
the data by construction, with no penalty to tune.

In the unit box (actions scaled to `[-1, 1]` by the Box bounds, as d3rlpy's
`MinMaxActionScaler`), with `G` the conditional VAE (`algorithms.vae`) and `pi(s) = 2 *
tanh(f(s))` the deterministic latent actor:

* imitator (`imitator`), on the first `warmup_steps` updates only: the VAE's loss
  `mean_d (D(s, z) - a)^2 + beta * mean_j KL(q(z|s, a) || N(0, I))`;
* from update `warmup_steps` on, the VAE frozen:
  * critic (`critic`): the ensemble regresses `y = r + gamma * (1 - terminated) * (lam *
    min_k Q'_k(s', a') + (1 - lam) * max_k Q'_k(s', a'))`, `a' = D(s', pi'(s'))` (the target
    actor);
  * actor (`actor`): `-Q_1(s, D(s, pi(s)))`, the gradient through the decoder into `pi`;
  * the targets of the critics and the actor follow with Polyak weight `tau`;
* acting: `D(s, pi(s))`, deterministic.

A phase's optimizers skip the other phase's updates (`actor_critic_parts.during`: zero
updates, their Adam state untouched, as d3rlpy's skipped updates); every loss is still computed
and reported.

Defaults are d3rlpy 2.8's `PLASConfig` under its names (RLlib has no PLAS): `actor_lr=1e-4`,
`critic_lr=1e-3`, `imitator_lr=1e-4`, batch 100, `gamma=0.99`, `tau=0.005`, `n_critics=2`,
`lam=0.75`, `warmup_steps=500000`, `beta=0.5`, latent width twice the action's, latent bound
2 (the paper's), log-std in [-4, 15], 256-256 ReLU networks from PyTorch's `nn.Linear` draw.
One difference from d3rlpy's code: the decoder's output is tanh-squashed into the unit box
(the paper's; d3rlpy 2.8's `VAEDecoder` skips the tanh at its default). d3rlpy's
`PLASWithPerturbation` (BCQ's perturbation actor on the decoded action, trained with the
latent actor) is `PLASWithPerturbationConfig`. Box actions with finite bounds only; no
recurrent form.
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
    during,
    mixed_min_max,
    td_regression,
    td_target,
    unit_box,
)
from rljax_offline.algorithms.bcq import check_box, perturbation_actor, unit_to_dist_inputs
from rljax_offline.algorithms.options import (
    non_negative_float,
    non_negative_int,
    option,
    optional,
    positive_float,
    positive_int,
    probability,
)
from rljax_offline.algorithms.vae import conditional_vae, imitator_loss
from rljax_offline.learning.optim import make_optimizer
from rljax_offline.learning.spec import ActingSpec, AlgorithmSpec, LearningSpec, Loss
from rljax_offline.models.distributions import deterministic
from rljax_offline.models.networks import continuous_q_network, ensemble, mlp_network

__all__ = ["PLASConfig", "PLASWithPerturbationConfig", "plas_spec"]

LATENT_MAX = 2.0


@dataclasses.dataclass(frozen=True)
class PLASConfig(ActorCriticBaseConfig):
    """PLAS with d3rlpy's names and defaults (see the module docstring).

    Example:
        >>> from rljax_offline import PLASConfig
        >>> algo = (PLASConfig().environment("Pendulum-v1")
        ...         .offline_data(input_="data/pendulum_mixed")
        ...         .training(warmup_steps=10, num_updates_per_iteration=20)
        ...         .learners(num_devices=1)).build()  # batch 100 (d3rlpy's): not over 8
        >>> result = algo.train()
    """

    algo_name = "plas"

    lr: float | None = option(None, "training", optional(positive_float),
                              "unused: PLAS has actor_lr, critic_lr and imitator_lr")
    train_batch_size_per_learner: int = option(100, "training", positive_int,
                                               "rows of one update, over all devices")
    actor_lr: float = option(1e-4, "training", positive_float,
                             "learning rate of the latent actor")
    critic_lr: float = option(1e-3, "training", positive_float,
                              "learning rate of the Q networks")
    imitator_lr: float = option(1e-4, "training", positive_float,
                                "learning rate of the VAE")
    n_critics: int = option(2, "training", positive_int,
                            "Q networks of the ensemble (lam mixes their min and max)")
    lam: float = option(0.75, "training", probability,
                        "target's weight of the critics' minimum against their maximum")
    warmup_steps: int = option(500000, "training", non_negative_int,
                               "updates of the VAE alone; then the critic and actor, VAE frozen")
    beta: float = option(0.5, "training", non_negative_float,
                         "weight of the VAE's KL term")

    def check_spaces(self, obs_spec, act_spec) -> None:
        check_box(self, act_spec)

    def make_spec(self, obs_spec, act_spec) -> AlgorithmSpec:
        return plas_spec(self, obs_spec, act_spec, None)


@dataclasses.dataclass(frozen=True)
class PLASWithPerturbationConfig(PLASConfig):
    """PLAS with BCQ's perturbation on the decoded action (d3rlpy's `PLASWithPerturbation`):
    the action is `xi(s, D(s, pi(s)))`, `xi(s, a) = clip(a + action_flexibility * tanh(g(s,
    a)), -1, 1)`, trained with the latent actor in the actor's loss; its target follows with
    the actor's. Defaults are d3rlpy 2.8's `PLASWithPerturbationConfig`: PLAS's and
    `action_flexibility=0.05`.

    Example:
        >>> from rljax_offline import PLASWithPerturbationConfig
        >>> config = PLASWithPerturbationConfig().training(action_flexibility=0.1)
        >>> config.action_flexibility, config.warmup_steps
        (0.1, 500000)
    """

    algo_name = "plas_with_perturbation"

    action_flexibility: float = option(0.05, "training", non_negative_float,
                                       "the perturbation's bound, in units of the "
                                       "action half-range")

    def make_spec(self, obs_spec, act_spec) -> AlgorithmSpec:
        return plas_spec(self, obs_spec, act_spec, self.action_flexibility)


def plas_spec(config: PLASConfig, obs_spec, act_spec, phi: float | None) -> AlgorithmSpec:
    """PLAS's learner for `config` (the spaces checked first); with `phi`, BCQ's perturbation
    of bound `phi` on the decoded action (`PLASWithPerturbationConfig`).

    Args:
      config: the PLAS config.
      obs_spec: the observation space's spec.
      act_spec: the action space's spec.
      phi: the perturbation's bound, or None for none.
    """
    config.check_spaces(obs_spec, act_spec)
    mc, dim = config.model_config, int(sp.flat_dim(act_spec))
    to_unit, env_action = unit_box(act_spec)
    vae = conditional_vae(obs_spec, dim, 2 * dim, mc)
    latent_actor = mlp_network(obs_spec, vae.latent_dim, mc)
    perturb = None if phi is None else perturbation_actor(obs_spec, dim, mc, phi)
    q = ensemble(continuous_q_network(obs_spec, act_spec, mc), config.n_critics)
    gamma, lam, warmup = config.gamma, config.lam, config.warmup_steps
    prefix = {"online": "", "target": "target_"}

    def unit_action(params, which, obs):
        """The action of the online or the target actor (and perturbation), in the unit box."""
        latent = LATENT_MAX * jnp.tanh(latent_actor.apply(params[prefix[which] + "policy"],
                                                          obs))
        unit = vae.decode(params["vae"], obs, latent)
        return unit if perturb is None else perturb.apply(
            params[prefix[which] + "perturbation"], obs, unit)

    def init(rng):
        k1, k2, k3, k4 = jax.random.split(rng, 4)
        params = {"policy": latent_actor.init(k1), "q": q.init(k2), "vae": vae.init(k3)}
        return params if perturb is None else {**params, "perturbation": perturb.init(k4)}

    def critic_loss(params, batch, rng, axis):
        next_unit = unit_action(params, "target", batch["new_obs"])
        values = q.apply(params["target_q"], batch["new_obs"], env_action(next_unit))
        return td_regression(q, params, batch,
                             td_target(batch, mixed_min_max(values, lam), gamma))

    def actor_loss(params, batch, rng, axis):
        unit = unit_action(params, "online", batch["obs"])
        q1 = q.apply(params["q"], batch["obs"], env_action(unit))[0]
        return -q1, {"policy_loss": -q1}

    actors = ("policy",) if perturb is None else ("policy", "perturbation")
    learning = LearningSpec(
        init=init,
        losses=(Loss("imitator", ("vae",), imitator_loss(vae, to_unit, config.beta),
                     during(make_optimizer(config.imitator_lr, config.grad_clip), 0, warmup)),
                *critic_and_actor(config, critic_loss, actor_loss, actor_nets=actors,
                                  start=warmup)),
        targets={"target_q": "q", **{f"target_{a}": a for a in actors}}, tau=config.tau)
    acting = ActingSpec(
        act=lambda params, obs: unit_to_dist_inputs(unit_action(params, "online", obs)),
        dist=deterministic(act_spec))
    return AlgorithmSpec(learning, acting, clipped_q_data(margin=0.0))
