"""ReBRAC (Tarasov et al. 2023, "Revisiting the Minimalist Approach to Offline Reinforcement
Learning"): TD3+BC with the behavior penalty in both the actor and the critic, deeper networks
with layer normalization, and larger batches.

In the unit box (actions scaled to `[-1, 1]` by the Box bounds, as d3rlpy's
`MinMaxActionScaler`; the critics take their action input there too), with `pi` the
deterministic `tanh` actor and `a'_D` the data's action at the next step (`next_actions`):

* critic (`critic`): the ensemble regresses
  `y = r + gamma * (1 - terminated) * (min_k Q'_k(s', a~') - critic_beta * |a~' - a'_D|^2)`,
  `a~' = clip(pi'(s') + clip(sigma * eps, -c, c), -1, 1)` (TD3's target smoothing); the
  penalty is left out on an episode's last step, where the data has no next action (d3rlpy
  has no such row at a truncated episode's end, its episodes keeping no final observation,
  and at a terminal one penalizes against a zero action inside the term `1 - terminated`
  zeroes);
* actor (`actor`), every `update_actor_interval`-th update:
  `-lambda * min_k Q_k(s, pi(s)) + actor_beta * |pi(s) - a|^2`, `lambda = 1 / mean|min_k Q_k(s,
  pi(s))|` over the global batch, held constant in the gradient;
* the targets of both follow with Polyak weight `tau` on the actor's updates.

Defaults are d3rlpy 2.8's `ReBRACConfig` under its names (RLlib has no ReBRAC): `actor_beta=
0.001`, `critic_beta=0.01`, learning rates 1e-3, batch 1024, `gamma=0.99`, `tau=0.005`,
`target_smoothing_sigma=0.2`, `target_smoothing_clip=0.5`, `update_actor_interval=2`, two
critics, no observation normalization; networks of the paper and of d3rlpy's reproduction
script: three hidden layers of 256 with layer normalization after each ReLU
(`fcnet_use_layernorm=True`, RLlib's key, with `fcnet_layernorm_placement="after_activation"`:
d3rlpy's and CORL's place; RLlib's MLPs put it before the activation) from PyTorch's
`nn.Linear` draw. The placement matters: on `pendulum-mixed` (seed 0, 3,000 updates, 10
paired final episodes) RLlib's placement ended at -531, this one at -197, d3rlpy's ReBRAC at
-192. d3rlpy's config itself defaults to its 256-256 encoder without layer norm;
`rl_module(model_config={"fcnet_hiddens": [256, 256], "fcnet_use_layernorm": False})` gives
that. The paper tunes `actor_beta` and `critic_beta`
per data set. Box actions with finite bounds only; no recurrent form.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from rljax_offline.algorithms.actor_critic_parts import td_regression, td_target
from rljax_offline.algorithms.options import (
    boolean,
    dict_or_none,
    non_negative_float,
    option,
    optional,
    positive_float,
    positive_int,
)
from rljax_offline.algorithms.td3_bc import DeterministicActorConfig, td3_parts, td3_spec
from rljax_offline.connectors.learner import add_next_actions, clip_actions_inside_bounds
from rljax_offline.learning.spec import AlgorithmSpec, DataSpec
from rljax_offline.models.initializers import TORCH_DEFAULT
from rljax_offline.models.networks import continuous_q_network, ensemble

REBRAC_COLUMNS = ("obs", "actions", "rewards", "new_obs", "terminateds", "next_actions",
                  "next_actions_valid")


@dataclasses.dataclass(frozen=True)
class ReBRACConfig(DeterministicActorConfig):
    """ReBRAC with d3rlpy's names and defaults (see the module docstring).

    Example:
        >>> from rljax_offline import ReBRACConfig
        >>> algo = (ReBRACConfig().environment("Pendulum-v1")
        ...         .offline_data(input_="data/pendulum_mixed")
        ...         .training(actor_beta=0.01, critic_beta=0.1, num_updates_per_iteration=20)
        ...         ).build()
        >>> result = algo.train()
    """

    algo_name = "rebrac"

    lr: float | None = option(None, "training", optional(positive_float),
                              "unused: ReBRAC has actor_lr and critic_lr")
    train_batch_size_per_learner: int = option(1024, "training", positive_int,
                                               "rows of one update, over all devices")
    actor_lr: float = option(1e-3, "training", positive_float, "learning rate of the actor")
    critic_lr: float = option(1e-3, "training", positive_float,
                              "learning rate of the Q networks")
    actor_beta: float = option(1e-3, "training", non_negative_float,
                               "weight of the actor's BC penalty |pi(s) - a|^2")
    critic_beta: float = option(1e-2, "training", non_negative_float,
                                "weight of the target's BC penalty |a~' - a'_data|^2")
    n_critics: int = option(2, "training", positive_int,
                            "Q networks of the ensemble, their minimum in targets")
    normalize_observations: bool = option(
        False, "training", boolean,
        "normalize observations by the data set's mean and std (learning and acting)")
    model_config: dict = option(
        {"fcnet_hiddens": [256, 256, 256], "fcnet_activation": "relu",
         "fcnet_use_layernorm": True, "fcnet_layernorm_placement": "after_activation",
         **TORCH_DEFAULT},
        "rl_module", dict_or_none,
        "RLlib's model-config keys; ReBRAC's 3x256 layer-normed networks, PyTorch's draw")

    def make_spec(self, obs_spec, act_spec) -> AlgorithmSpec:
        parts = td3_parts(self, obs_spec, act_spec, ensemble(
            continuous_q_network(obs_spec, act_spec, self.model_config), self.n_critics))
        q, gamma = parts.q, self.gamma
        actor_beta, critic_beta = self.actor_beta, self.critic_beta

        def critic_loss(params, batch, rng, axis):
            next_unit = parts.next_unit(params, batch, rng)
            next_q = jnp.min(q.apply(params["target_q"], batch["new_obs"],
                                     parts.env_action(next_unit)), axis=0)
            penalty = batch["next_actions_valid"] * jnp.sum(
                (next_unit - parts.to_unit(batch["next_actions"])) ** 2, axis=-1)
            loss, metrics = td_regression(
                q, params, batch, td_target(batch, next_q - critic_beta * penalty, gamma))
            return loss, {**metrics, "critic_bc_penalty": penalty}

        def actor_loss(params, batch, rng, axis):
            unit = parts.unit_action(params["policy"], batch["obs"])
            q_pi = jnp.min(q.apply(params["q"], batch["obs"], parts.env_action(unit)), axis=0)
            lam = 1.0 / jax.lax.stop_gradient(
                jnp.maximum(axis.mean(jnp.abs(q_pi), batch["loss_mask"]), 1e-6))
            bc = jnp.sum((unit - parts.to_unit(batch["actions"])) ** 2, axis=-1)
            loss = -lam * q_pi + actor_beta * bc
            return loss, {"policy_loss": loss, "bc_loss": bc, "q_lambda": lam}

        return td3_spec(self, parts, critic_loss, actor_loss, DataSpec(
            columns=REBRAC_COLUMNS,
            learner_connector=(clip_actions_inside_bounds(margin=0.0), add_next_actions())))
