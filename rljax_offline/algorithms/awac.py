"""AWAC (Nair et al. 2020, "AWAC: Accelerating Online Reinforcement Learning with Offline
Datasets"): an actor-critic whose actor is advantage-weighted regression onto the data's
actions, so it never needs the behavior policy's density, and whose critic is an ordinary
off-policy Q function (online fine-tuning continues the same way).

* critic (`critic`): the ensemble regresses `y = r + gamma * (1 - terminated) * min_k
  Q'_k(s', a')`, `a' ~ pi(.|s')`;
* actor (`actor`): `-w(s, a) * log pi(a|s)` with `A(s, a) = min_k Q_k(s, a) - V(s)`,
  `V(s) = mean_{j <= n_action_samples} min_k Q_k(s, a_j)`, `a_j ~ pi(.|s)`, and
  `w = N * softmax_batch(A / lam)`: the exponential weights `exp(A / lam)` normalized over the
  global batch (all devices' rows, masked ones left out) to mean 1, held constant;
* the target Q networks follow with Polyak weight `tau` every update.

Defaults are d3rlpy 2.8's `AWACConfig` under its names (RLlib has no AWAC): `lam=1.0`,
`n_action_samples=1`, `n_critics=2`, learning rates 3e-4, batch 1024, `gamma=0.99`,
`tau=0.005`, 256-256 ReLU networks from PyTorch's `nn.Linear` draw (d3rlpy's), and d3rlpy's
actor (`actor_tanh_mean=True`): a Gaussian around a tanh mean in the unit box with a
state-independent log-std in [-6, 0] (`models.actor_and_q.tanh_mean_actor`). With
`actor_tanh_mean=False` the actor is the tanh-squashed Gaussian that CQL, IQL and SAC share, so
the checkpoint starts SAC's online fine-tuning (`SACConfig.training(init_from=...)`); on mixed
Pendulum at 20,000 updates that actor's final policies scored 78 below d3rlpy's, d3rlpy's actor
level with them (docs/benchmarks/zoo-parity-20k.md). One difference from d3rlpy's code: the TD
target has no entropy term (the paper's; d3rlpy's AWAC inherits SAC's target with its
temperature fixed at 1, drawing `a'` from the tanh-squashed Gaussian of the actor's outputs:
`d3rlpy_target=True` trains with that target, a diagnosis). The data's actions are clipped just
inside the bounds (where a squashed Gaussian has a density). Box actions with finite bounds
only; no recurrent form. The learner is `advantage_weighted`'s, shared with CRR: this module
chooses its weights.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from rljax_offline.algorithms.actor_critic_base import ActorCriticBaseConfig, check_squashed_box
from rljax_offline.algorithms.advantage_weighted import advantage_weighted_spec
from rljax_offline.algorithms.options import (
    boolean,
    option,
    optional,
    positive_float,
    positive_int,
)
from rljax_offline.learning.losses import batch_softmax_weights
from rljax_offline.learning.spec import AlgorithmSpec
from rljax_offline.models.actor_and_q import tanh_mean_actor
from rljax_offline.models.distributions import squashed_gaussian


@dataclasses.dataclass(frozen=True)
class AWACConfig(ActorCriticBaseConfig):
    """AWAC with d3rlpy's names and defaults (see the module docstring).

    Example:
        >>> from rljax_offline import AWACConfig
        >>> algo = (AWACConfig().environment("Pendulum-v1")
        ...         .offline_data(input_="data/pendulum_mixed")
        ...         .training(lam=0.3, num_updates_per_iteration=20)).build()
        >>> result = algo.train()
    """

    algo_name = "awac"

    lr: float | None = option(None, "training", optional(positive_float),
                              "unused: AWAC has actor_lr and critic_lr")
    train_batch_size_per_learner: int = option(1024, "training", positive_int,
                                               "rows of one update, over all devices")
    actor_lr: float = option(3e-4, "training", positive_float, "learning rate of the actor")
    critic_lr: float = option(3e-4, "training", positive_float,
                              "learning rate of the Q networks")
    lam: float = option(1.0, "training", positive_float,
                        "temperature of the advantage weights softmax(A / lam)")
    n_action_samples: int = option(1, "training", positive_int,
                                   "policy actions per state that estimate V(s)")
    n_critics: int = option(2, "training", positive_int,
                            "Q networks of the ensemble, their minimum in targets")
    actor_tanh_mean: bool = option(True, "training", boolean,
                                   "d3rlpy's actor: a Gaussian around tanh(mean) in the unit box "
                                   "with a state-independent std in [e^-6, 1]; False: the "
                                   "tanh-squashed Gaussian SAC fine-tunes from")
    d3rlpy_target: bool = option(False, "training", boolean,
                                 "d3rlpy's TD target, a diagnosis: a' = tanh(mean + std * "
                                 "noise) and minus its log-density (SAC's target at "
                                 "temperature 1)")

    def check_spaces(self, obs_spec, act_spec) -> None:
        check_squashed_box(self, act_spec)

    def make_spec(self, obs_spec, act_spec) -> AlgorithmSpec:
        self.check_spaces(obs_spec, act_spec)
        lam = self.lam

        def weight(adv, batch, axis):  # exp(A / lam), normalized over the global batch
            w = batch_softmax_weights(adv / lam, batch["loss_mask"], axis)
            return w, {"advantage_weight_max": axis.max(w, batch["loss_mask"])}

        return advantage_weighted_spec(self, obs_spec, act_spec, over_critics=jnp.min,
                                       reduce=jnp.mean, weight=weight, target_policy=False,
                                       tau=self.tau, policy=tanh_mean_actor(
                                           obs_spec, act_spec, self.model_config,
                                           log_std_min=-6.0, log_std_max=0.0)
                                       if self.actor_tanh_mean else None,
                                       soft_target=squashed_gaussian(act_spec)
                                       if self.d3rlpy_target else None)
