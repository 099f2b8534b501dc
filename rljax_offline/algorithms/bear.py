"""BEAR (Kumar et al. 2019, "Stabilizing Off-Policy Q-Learning via Bootstrapping Error
Reduction"): SAC whose actor is held near the data's action distribution by a constraint on
the maximum mean discrepancy (MMD) between the policy's actions and those of a generative
model of the data, enforced with a learned Lagrange multiplier.

In the unit box (actions scaled to `[-1, 1]` by the Box bounds), with `G` the conditional VAE
(`algorithms.vae`), `pi` the tanh-squashed Gaussian actor, `alpha = exp(log_alpha)` the
multiplier and `T = exp(log_temp)` the entropy temperature:

* imitator (`imitator`): the VAE's loss `mean_d (D(s, z) - a)^2 + vae_kl_weight * KL`;
* `MMD(s)` over `n_mmd_action_samples` draws `x_i ~ pi(.|s)` and `y_j = D(s, z_j)`,
  `z_j ~ clip(N(0, I), -0.5, 0.5)` (held constant), both before their tanh (`mmd_space`):
  `sqrt(mean_ij k(x_i, x_j) + mean_ij k(y_i, y_j) - 2 mean_ij k(x_i, y_j) + 1e-6)`, with
  `k(x, y) = exp(-sum_d |x - y|_d / (2 mmd_sigma))` ("laplacian") or
  `exp(-sum_d (x - y)_d^2 / (2 mmd_sigma))` ("gaussian");
* critic (`critic`): the ensemble regresses
  `y = r + gamma * (1 - terminated) * (m(s', a'_*) - T * log pi(a'_*|s'))`, `m = lam * min_k
  Q'_k + (1 - lam) * max_k Q'_k`, over `n_target_samples` draws `a'_i ~ pi(.|s')`, `a'_*`
  the one of highest `m`;
* actor, for the first `warmup_steps` updates (`warmup_actor`): `alpha * (MMD(s) -
  alpha_threshold)` alone; after them (`actor`): `T * log pi(a|s) - min_k Q_k(s, a) + alpha *
  (MMD(s) - alpha_threshold)`, `a ~ pi(.|s)` reparameterised;
* after the warm-up, temperature (`temp`): SAC's `-log_temp * (log pi + target)`, target
  `-dim(actions)`; multiplier (`alpha`): `-alpha * (MMD(s) - alpha_threshold)` (it grows
  while the constraint is violated), `log_alpha` kept in `[-5, 10]`;
* the target critics follow with Polyak weight `tau` every update;
* acting: `n_action_samples` draws of `pi(.|s)` per state with the step's key
  (`ActingSpec.takes_key`), the one of highest `Q_1` taken.

A phase's optimizers skip the other phase's updates (`actor_critic_parts.during`); d3rlpy's one
actor optimizer is two here (`warmup_actor`, `actor`: the Adam state starts afresh after the
warm-up). Defaults are d3rlpy 2.8's `BEARConfig` under its names: learning rates 1e-4
(`actor_lr`), 3e-4 (`critic_lr`, `imitator_lr`), 1e-4 (`temp_lr`), 1e-3 (`alpha_lr`), batch
256, `gamma=0.99`, `tau=0.005`, `n_critics=2`, `initial_temperature=1`, `initial_alpha=1`,
`alpha_threshold=0.05`, `lam=0.75`, `n_action_samples=100`, `n_target_samples=10`,
`n_mmd_action_samples=4`, `mmd_kernel="laplacian"`, `mmd_sigma=20`, `vae_kl_weight=0.5`,
`warmup_steps=40000`, 256-256 ReLU networks from PyTorch's draw, and d3rlpy's space for the
MMD (`mmd_space="pre_tanh"`): the policy's Gaussian draws before their tanh against the
decoder's output before its tanh; `mmd_space="actions"` compares the squashed actions in the
unit box instead (the paper's). One difference from d3rlpy is kept on purpose: after the
warm-up our actor's loss holds the MMD term, as the paper's does. d3rlpy's actor never sees
it there (its multiplier update backpropagates `-mmd_loss` into the actor's gradient, which
the actor loss's `+mmd_loss` then cancels: `benchmarks/d3rlpy_bear_actor_gradient.py`), so
after its warm-up d3rlpy trains a SAC actor with BEAR's target and acting; the zoo's
benchmark page measures what that changes. Box actions with finite bounds only; no
recurrent form.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import optax

from rljax_offline import spaces as sp
from rljax_offline.algorithms.actor_critic_base import ActorCriticBaseConfig
from rljax_offline.algorithms.actor_critic_parts import (
    clipped_q_data,
    during,
    mixed_min_max,
    td_regression,
    td_target,
)
from rljax_offline.algorithms.bcq import check_box, unit_to_dist_inputs
from rljax_offline.algorithms.cql import repeat_rows, sample_per_example, split_keys
from rljax_offline.algorithms.options import (
    non_negative_float,
    non_negative_int,
    one_of,
    option,
    optional,
    positive_float,
    positive_int,
    probability,
)
from rljax_offline.algorithms.vae import conditional_vae, imitator_loss, sample_latent
from rljax_offline.learning.losses import target_entropy, temperature_loss
from rljax_offline.learning.optim import make_optimizer
from rljax_offline.learning.spec import ActingSpec, AlgorithmSpec, LearningSpec, Loss
from rljax_offline.models.actor_and_q import actor
from rljax_offline.models.distributions import action_scaler, deterministic
from rljax_offline.models.networks import continuous_q_network, ensemble

__all__ = ["BEARConfig", "clamped", "mmd"]

LOG_ALPHA_RANGE = (-5.0, 10.0)
# The policy's pre-tanh draw recovered from its squashed action: exact until tanh saturates
# (|u| about 7 in float32), where the clip holds it.
PRE_TANH_EPS = 1e-6


def mmd(x: jax.Array, y: jax.Array, kernel: str, sigma: float) -> jax.Array:
    """BEAR's MMD estimate per state between samples `x` `[N, n, d]` and `y` `[N, m, d]`
    (see the module docstring).

    Args:
      x: the policy's actions.
      y: the generative model's actions.
      kernel: "laplacian" or "gaussian".
      sigma: the kernel's width (`mmd_sigma`).
    """

    def k(a, b):
        diff = a[:, :, None, :] - b[:, None, :, :]
        dist = jnp.sum(jnp.abs(diff) if kernel == "laplacian" else diff**2, axis=-1)
        return jnp.mean(jnp.exp(-dist / (2.0 * sigma)), axis=(1, 2))

    return jnp.sqrt(k(x, x) + k(y, y) - 2.0 * k(x, y) + 1e-6)


def clamped(optimizer: optax.GradientTransformation, low: float, high: float
            ) -> optax.GradientTransformation:
    """`optimizer`, then the parameters kept in `[low, high]` after each update (d3rlpy's
    in-place clamp of `log_alpha`).

    Args:
      optimizer: the optax transformation.
      low: the smallest value.
      high: the largest value.
    """

    def update(updates, state, params=None):
        updates, state = optimizer.update(updates, state, params)
        return jax.tree_util.tree_map(lambda u, p: jnp.clip(p + u, low, high) - p, updates,
                                      params), state

    return optax.GradientTransformation(optimizer.init, update)


@dataclasses.dataclass(frozen=True)
class BEARConfig(ActorCriticBaseConfig):
    """BEAR with d3rlpy's names and defaults (see the module docstring).

    Example:
        >>> from rljax_offline import BEARConfig
        >>> algo = (BEARConfig().environment("Pendulum-v1")
        ...         .offline_data(input_="data/pendulum_mixed")
        ...         .training(warmup_steps=10, n_action_samples=10,
        ...                   num_updates_per_iteration=20)).build()
        >>> result = algo.train()
    """

    algo_name = "bear"

    lr: float | None = option(None, "training", optional(positive_float),
                              "unused: BEAR has actor_lr, critic_lr, imitator_lr, temp_lr "
                              "and alpha_lr")
    train_batch_size_per_learner: int = option(256, "training", positive_int,
                                               "rows of one update, over all devices")
    actor_lr: float = option(1e-4, "training", positive_float, "learning rate of the actor")
    critic_lr: float = option(3e-4, "training", positive_float,
                              "learning rate of the Q networks")
    imitator_lr: float = option(3e-4, "training", positive_float,
                                "learning rate of the VAE")
    temp_lr: float = option(1e-4, "training", positive_float,
                            "learning rate of the entropy temperature")
    alpha_lr: float = option(1e-3, "training", positive_float,
                             "learning rate of the MMD multiplier")
    n_critics: int = option(2, "training", positive_int, "Q networks of the ensemble")
    initial_temperature: float = option(1.0, "training", positive_float,
                                        "initial entropy temperature")
    initial_alpha: float = option(1.0, "training", positive_float,
                                  "initial MMD multiplier")
    alpha_threshold: float = option(0.05, "training", non_negative_float,
                                    "the MMD the multiplier holds the policy under")
    lam: float = option(0.75, "training", probability,
                        "target's weight of the critics' minimum against their maximum")
    n_action_samples: int = option(100, "training", positive_int,
                                   "candidate actions per state when acting")
    n_target_samples: int = option(10, "training", positive_int,
                                   "candidate next actions per state in the target")
    n_mmd_action_samples: int = option(4, "training", positive_int,
                                       "actions per state of each side of the MMD")
    mmd_kernel: str = option("laplacian", "training", one_of("laplacian", "gaussian"),
                             "the MMD's kernel")
    mmd_sigma: float = option(20.0, "training", positive_float, "the kernel's width")
    vae_kl_weight: float = option(0.5, "training", non_negative_float,
                                  "weight of the VAE's KL term")
    warmup_steps: int = option(40000, "training", non_negative_int,
                               "updates whose actor minimizes the MMD term alone")
    mmd_space: str = option(
        "pre_tanh", "training", one_of("pre_tanh", "actions"),
        "where the MMD compares the policy with the VAE: before their tanh (d3rlpy's) or "
        "on the actions in the unit box (the paper's)")

    def check_spaces(self, obs_spec, act_spec) -> None:
        check_box(self, act_spec)

    def make_spec(self, obs_spec, act_spec) -> AlgorithmSpec:
        self.check_spaces(obs_spec, act_spec)
        policy = actor(obs_spec, act_spec, self.model_config)
        dist = policy.dist
        dim = int(sp.flat_dim(act_spec))
        to_unit, _ = action_scaler(act_spec)
        vae = conditional_vae(obs_spec, dim, 2 * dim, self.model_config)
        q = ensemble(continuous_q_network(obs_spec, act_spec, self.model_config),
                     self.n_critics)
        gamma, lam, warmup = self.gamma, self.lam, self.warmup_steps
        pre_tanh = self.mmd_space == "pre_tanh"
        entropy_target = target_entropy("auto", act_spec)

        def init(rng):
            k1, k2, k3 = jax.random.split(rng, 3)
            return {"policy": policy.init(k1), "q": q.init(k2), "vae": vae.init(k3),
                    "log_temp": jnp.asarray(math.log(self.initial_temperature), jnp.float32),
                    "log_alpha": jnp.asarray(math.log(self.initial_alpha), jnp.float32)}

        def draws(params, obs, keys, n):
            """`n` reparameterised policy draws per state: `[N * n]` rows of observations,
            actions and their log-probabilities."""
            obs_n = repeat_rows(obs, n)
            inputs = policy.apply(params["policy"], obs_n)
            a, logp = sample_per_example(dist, inputs, split_keys(keys, n).reshape(-1, 2))
            return obs_n, a, logp

        def mmd_term(params, obs, keys):
            """`MMD(s) - alpha_threshold` per state `[N]` (gradient into the policy)."""
            rows, m = obs.shape[0], self.n_mmd_action_samples
            k_pi, k_data = split_keys(keys, 2).transpose(1, 0, 2)
            _, a, _ = draws(params, obs, k_pi, m)
            latent = sample_latent(split_keys(k_data, m).reshape(-1, 2), vae.latent_dim)
            x = to_unit(a.reshape(rows * m, dim)).reshape(rows, m, dim)
            if pre_tanh:  # d3rlpy's: the Gaussian's draws and the decoder's raw output
                x = jnp.arctanh(jnp.clip(x, -1 + PRE_TANH_EPS, 1 - PRE_TANH_EPS))
                data = vae.decode_pre_tanh(params["vae"], repeat_rows(obs, m), latent)
            else:
                data = vae.decode(params["vae"], repeat_rows(obs, m), latent)
            y = jax.lax.stop_gradient(data).reshape(rows, m, dim)
            return mmd(x, y, self.mmd_kernel, self.mmd_sigma) - self.alpha_threshold

        def critic_loss(params, batch, rng, axis):
            rows, n = batch["rewards"].shape[0], self.n_target_samples
            obs_n, a, logp = draws(params, batch["new_obs"], rng, n)
            values = q.apply(params["target_q"], obs_n, a).reshape(-1, rows, n)
            mixed = mixed_min_max(values, lam)
            best = jnp.argmax(mixed, axis=-1)
            pick = jnp.arange(rows)
            soft = mixed[pick, best] - jnp.exp(params["log_temp"]) * \
                logp.reshape(rows, n)[pick, best]
            return td_regression(q, params, batch, td_target(batch, soft, gamma))

        def alpha_value(params):
            return jnp.exp(jax.lax.stop_gradient(params["log_alpha"]))

        def warmup_actor_loss(params, batch, rng, axis):
            gap = mmd_term(params, batch["obs"], rng)
            loss = alpha_value(params) * gap
            return loss, {"policy_loss": loss, "mmd": gap + self.alpha_threshold}

        def actor_loss(params, batch, rng, axis):
            k_sac, k_mmd = split_keys(rng, 2).transpose(1, 0, 2)
            a, logp = sample_per_example(dist, policy.apply(params["policy"], batch["obs"]),
                                         k_sac)
            q_pi = jnp.min(q.apply(params["q"], batch["obs"], a), axis=0)
            temp = jnp.exp(jax.lax.stop_gradient(params["log_temp"]))
            gap = mmd_term(params, batch["obs"], k_mmd)
            loss = temp * logp - q_pi + alpha_value(params) * gap
            return loss, {"policy_loss": loss, "logp": logp}

        def temp_loss(params, batch, rng, axis):
            _, logp = sample_per_example(dist, policy.apply(params["policy"], batch["obs"]),
                                         rng)
            loss = temperature_loss(params["log_temp"], logp, entropy_target)
            return loss, {"temp_loss": loss, "temp": jnp.exp(params["log_temp"])}

        def alpha_loss(params, batch, rng, axis):
            gap = jax.lax.stop_gradient(mmd_term(params, batch["obs"], rng))
            loss = -jnp.exp(params["log_alpha"]) * gap
            return loss, {"alpha_loss": loss, "alpha": jnp.exp(params["log_alpha"])}

        def act(params, key, obs):
            rows, n = jax.tree_util.tree_leaves(obs)[0].shape[0], self.n_action_samples
            obs_n, a, _ = draws(params, obs, jax.random.split(key, rows), n)
            values = q.apply(params["q"], obs_n, a)[0].reshape(rows, n)
            chosen = a.reshape(rows, n, dim)[jnp.arange(rows), jnp.argmax(values, axis=-1)]
            return unit_to_dist_inputs(to_unit(chosen))

        def opt(lr, clip=True):
            return make_optimizer(lr, self.grad_clip if clip else None)

        learning = LearningSpec(
            init=init,
            losses=(Loss("imitator", ("vae",), imitator_loss(vae, to_unit, self.vae_kl_weight),
                         opt(self.imitator_lr)),
                    Loss("critic", ("q",), critic_loss, opt(self.critic_lr)),
                    Loss("warmup_actor", ("policy",), warmup_actor_loss,
                         during(opt(self.actor_lr), 0, warmup)),
                    Loss("actor", ("policy",), actor_loss, during(opt(self.actor_lr), warmup)),
                    Loss("temp", ("log_temp",), temp_loss,
                         during(opt(self.temp_lr, False), warmup)),
                    Loss("alpha", ("log_alpha",), alpha_loss,
                         during(clamped(opt(self.alpha_lr, False), *LOG_ALPHA_RANGE),
                                warmup))),
            targets={"target_q": "q"}, tau=self.tau)
        acting = ActingSpec(act=act, dist=deterministic(act_spec), takes_key=True)
        return AlgorithmSpec(learning, acting, clipped_q_data(margin=0.0))
