"""Cal-QL (Nakamoto et al. 2023, "Cal-QL: Calibrated Offline RL Pre-Training for Efficient
Online Fine-Tuning"): CQL whose conservative term never pushes the policy's values below the
data's own return, so the pre-trained Q function is calibrated and online fine-tuning does not
first unlearn it.

CQL's critic (`algorithms.cql`, Box actions) minimizes TD error plus
`min_q_weight * (temperature * logsumexp_j(Q(s, a_j) / temperature) - Q(s, a))` over random
actions and actions of the current policy at `s` and `s'` (each importance-weighted by its
density). Cal-QL changes one thing: each policy action's value inside the logsumexp is
`max(Q(s, a_j), V^mu(s))`, with `V^mu(s)` the data's discounted Monte-Carlo return to go from
`s` (`returns_to_go`, `sum_t gamma^t r_t` to the end of the recorded episode, the learner
piece MARWIL uses). Where Q is already below the behavior's return the regulariser stops
pushing it down. Everything else (SAC's actor and temperature, twin Q, Polyak targets, the
Lagrangian weight) is CQL's.

Online fine-tuning: a Cal-QL checkpoint starts SAC (`SACConfig().training(init_from=path)`):
actor, Q networks, targets and temperature, the existing path for CQL checkpoints.

Defaults are d3rlpy 2.8's `CalQLConfig` (its CQL's) under RLlib's CQL names (RLlib has no
Cal-QL): learning rates `actor_lr=1e-4`, `critic_lr=3e-4`, `alpha_lr=1e-4` (d3rlpy's
`temp_learning_rate`), `min_q_weight=5.0` (`conservative_weight`), `num_actions=10`
(`n_action_samples`), batch 256, `tau=0.005`, two critics, no entropy term in the target
(`deterministic_backup=True`: d3rlpy's `soft_q_backup=False`), and d3rlpy's Lagrangian weight:
`lagrangian=True` with `lagrangian_thresh=50.0`, d3rlpy's `alpha_threshold=10` on the
unweighted gap times the weight 5 (RLlib's threshold applies to the weighted gap). Two
differences stay RLlib's, each an option for d3rlpy's: the target's `a'` is a draw from the
policy (d3rlpy's is the policy's mean action: `mean_action_backup=True`), and the multiplier
learns at `critic_lr` (d3rlpy's `alpha_learning_rate` is 1e-4: `alpha_prime_lr=1e-4`). Box
actions with finite bounds only (d3rlpy's Cal-QL has no Discrete form); no recurrent form.
"""

from __future__ import annotations

import dataclasses

import jax

from rljax_offline import spaces as sp
from rljax_offline.algorithms.config import ConfigError
from rljax_offline.algorithms.cql import CQLConfig
from rljax_offline.algorithms.marwil import add_returns_to_go
from rljax_offline.algorithms.options import (
    any_float,
    boolean,
    non_negative_float,
    option,
    optional,
    positive_float,
)
from rljax_offline.learning.spec import AlgorithmSpec
from rljax_offline.models.actor_and_q import check_bounded
from rljax_offline.models.policy import is_recurrent


@dataclasses.dataclass(frozen=True)
class CalQLConfig(CQLConfig):
    """Cal-QL: CQL's options (RLlib's names), d3rlpy's Cal-QL defaults (module docstring).

    Example:
        >>> from rljax_offline import CalQLConfig, SACConfig
        >>> offline = (CalQLConfig().environment("Pendulum-v1")
        ...            .offline_data(input_="data/pendulum_mixed")
        ...            .training(num_updates_per_iteration=20)).build()
        >>> result = offline.train()
        >>> path = offline.save("ckpt/cal_ql")
        >>> online = SACConfig().environment("Pendulum-v1").training(init_from=path).build()
        >>> online.started_from == path   # actor, Q networks, targets and temperature
        True
    """

    algo_name = "cal_ql"

    actor_lr: float = option(1e-4, "training", positive_float, "learning rate of the actor")
    critic_lr: float | None = option(
        3e-4, "training", optional(positive_float),
        "learning rate of the Q networks and of the Lagrangian weight alpha_prime")
    alpha_lr: float = option(1e-4, "training", positive_float,
                             "learning rate of the entropy coefficient")
    min_q_weight: float | None = option(5.0, "training", optional(non_negative_float),
                                        "weight of the (calibrated) CQL regulariser")
    lagrangian: bool = option(True, "training", boolean,
                              "learn the CQL weight (alpha_prime) to hold lagrangian_thresh")
    lagrangian_thresh: float = option(
        50.0, "training", any_float,
        "target of the weighted CQL gap with lagrangian=True (d3rlpy's 10 times weight 5)")

    def validate(self) -> None:
        super().validate()
        if is_recurrent(self.model_config or {}):
            raise ConfigError("CalQLConfig has no recurrent form: drop use_lstm / use_gru")

    def check_spaces(self, obs_spec, act_spec) -> None:
        if not isinstance(act_spec, sp.BoxSpec):
            raise ConfigError(f"CalQLConfig needs Box actions (CQL's SAC-based form), got "
                              f"{act_spec}")
        check_bounded(act_spec, "CalQLConfig")

    def policy_value_floor(self, batch: dict) -> jax.Array:
        return batch["returns_to_go"]

    def make_spec(self, obs_spec, act_spec) -> AlgorithmSpec:
        spec = super().make_spec(obs_spec, act_spec)
        data = spec.data._replace(
            columns=(*spec.data.columns, "returns_to_go"),
            learner_connector=(*spec.data.learner_connector,
                               add_returns_to_go(self.gamma, bootstrap_obs=False)))
        return spec._replace(data=data)
