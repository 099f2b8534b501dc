"""DiscreteBCQ (Fujimoto et al. 2019, "Benchmarking Batch Deep Reinforcement Learning
Algorithms"): BCQ for Discrete actions. An imitation head `G(a|s)` learns the data's action
distribution; the greedy policy takes the best action by Q among those the data makes likely
enough, in the Double DQN target and at acting time alike.

* allowed actions: `A(s) = {a : G(a|s) / max_a' G(a'|s) > action_flexibility}`;
* policy: `pi(s) = argmax_{a in A(s)} mean_k Q_k(s, a)`;
* loss (`qf`, one optimizer for Q and the imitation head):
  `sum_k huber(Q_k(s, a) - y) - log G(a|s) + beta * mean_a logits(s)_a^2`, with
  `y = r + gamma * (1 - terminated) * min_k Q'_k(s', pi(s'))` (the online networks choose,
  the targets value: Double DQN);
* the target Q networks are hard copies every `target_update_interval` updates.

With `share_encoder=True` (d3rlpy's default) the imitation head sits on the first Q
network's hidden layers: each Q network is one MLP with `2 n` outputs, Q values and logits
(a linear output layer of `2 n` units is two heads of `n` on the same hidden layers); with
`share_encoder=False` the imitator is an MLP of its own (`params["imitator"]`).

Defaults are d3rlpy 2.8's `DiscreteBCQConfig` under its names, RLlib's `lr` for its one
learning rate (RLlib has no BCQ): `lr=6.25e-5`, batch 32, `gamma=0.99`, `n_critics=1`,
`action_flexibility=0.3`, `beta=0.5`, `target_update_interval=8000`, `share_encoder=True`,
256-256 ReLU networks from PyTorch's `nn.Linear` draw. Acting returns the Q values with the
disallowed actions at -1e9 as the categorical's logits, so its greedy action is `pi(s)`.
Discrete actions only; no recurrent form.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from rljax_offline import spaces as sp
from rljax_offline.algorithms.actor_critic_base import D3RLPY_MODEL, Q_COLUMNS
from rljax_offline.algorithms.config import AlgorithmConfig, ConfigError
from rljax_offline.algorithms.options import (
    boolean,
    dict_or_none,
    non_negative_float,
    open_unit_interval,
    option,
    positive_float,
    positive_int,
)
from rljax_offline.learning.losses import huber, not_terminal
from rljax_offline.learning.optim import make_optimizer
from rljax_offline.learning.spec import ActingSpec, AlgorithmSpec, DataSpec, LearningSpec, Loss
from rljax_offline.models.distributions import categorical
from rljax_offline.models.networks import ensemble, mlp_network
from rljax_offline.models.policy import is_recurrent

__all__ = ["DiscreteBCQConfig"]

DISALLOWED = -1e9


@dataclasses.dataclass(frozen=True)
class DiscreteBCQConfig(AlgorithmConfig):
    """DiscreteBCQ with d3rlpy's names and defaults (see the module docstring).

    Example:
        >>> from rljax_offline import DiscreteBCQConfig
        >>> algo = (DiscreteBCQConfig().environment("CartPole-v1")
        ...         .offline_data(input_="data/cartpole_mixed")
        ...         .training(lr=1e-3, target_update_interval=100,
        ...                   num_updates_per_iteration=20)).build()
        >>> result = algo.train()
    """

    algo_name = "discrete_bcq"

    lr: float = option(6.25e-5, "training", positive_float,
                       "learning rate of the Q networks and the imitation head")
    train_batch_size_per_learner: int = option(32, "training", positive_int,
                                               "rows of one update, over all devices")
    n_critics: int = option(1, "training", positive_int,
                            "Q networks of the ensemble (mean to act, min in the target)")
    action_flexibility: float = option(
        0.3, "training", open_unit_interval,
        "an action is allowed where G(a|s) / max G(.|s) exceeds it (the paper's tau)")
    beta: float = option(0.5, "training", non_negative_float,
                         "weight of the imitation logits' squared penalty")
    target_update_interval: int = option(8000, "training", positive_int,
                                         "updates between hard target copies")
    share_encoder: bool = option(True, "training", boolean,
                                 "the imitation head on the first Q network's hidden layers")
    model_config: dict = option(D3RLPY_MODEL, "rl_module", dict_or_none,
                                "RLlib's model-config keys; d3rlpy's 256-256, PyTorch's draw")

    def validate(self) -> None:
        super().validate()
        if is_recurrent(self.model_config or {}):
            raise ConfigError(f"{type(self).__name__} has no recurrent form: drop use_lstm / "
                              "use_gru")

    def check_spaces(self, obs_spec, act_spec) -> None:
        if not isinstance(act_spec, sp.DiscreteSpec):
            raise ConfigError(f"{type(self).__name__} needs Discrete actions (a Q network per "
                              f"action); for Box actions use BCQConfig, got {act_spec}")

    def make_spec(self, obs_spec, act_spec) -> AlgorithmSpec:
        self.check_spaces(obs_spec, act_spec)
        n, shared = int(act_spec.n), self.share_encoder
        q = ensemble(mlp_network(obs_spec, 2 * n if shared else n, self.model_config),
                     self.n_critics)
        imitator = None if shared else mlp_network(obs_spec, n, self.model_config)
        gamma, beta = self.gamma, self.beta
        log_threshold = math.log(self.action_flexibility)

        def heads(params, obs, q_name="q"):
            """`(Q [k, N, n], imitation logits [N, n])` (the logits of the online networks)."""
            out = q.apply(params[q_name], obs)
            logits = out[0, :, n:] if shared else imitator.apply(params["imitator"], obs)
            return out[..., :n], logits

        def constrained(values, logits):
            """Q's mean over the ensemble with the disallowed actions at DISALLOWED."""
            log_probs = jax.nn.log_softmax(logits, axis=-1)
            allowed = log_probs - jnp.max(log_probs, axis=-1, keepdims=True) > log_threshold
            return jnp.where(allowed, jnp.mean(values, axis=0), DISALLOWED)

        def init(rng):
            k1, k2 = jax.random.split(rng)
            params = {"q": q.init(k1)}
            return params if shared else {**params, "imitator": imitator.init(k2)}

        def loss(params, batch, rng, axis):
            values, logits = heads(params, batch["obs"])
            actions = batch["actions"].astype(jnp.int32).reshape(-1)
            q_data = jnp.take_along_axis(values, actions[None, :, None], axis=-1)[..., 0]
            next_a = jnp.argmax(constrained(*heads(params, batch["new_obs"])), axis=-1)
            target_values, _ = heads(params, batch["new_obs"], "target_q")
            next_q = jnp.min(jnp.take_along_axis(target_values, next_a[None, :, None],
                                                 axis=-1)[..., 0], axis=0)
            y = jax.lax.stop_gradient(batch["rewards"] + gamma * not_terminal(batch) * next_q)
            td = jnp.sum(huber(q_data - y), axis=0)
            nll = -jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), actions[:, None],
                                       axis=-1)[:, 0]
            penalty = jnp.mean(logits**2, axis=-1)
            imitation = nll + beta * penalty
            return td + imitation, {"td_loss": td, "imitator_loss": imitation,
                                    "imitator_nll": nll, "qf_mean": q_data.mean(0),
                                    "td_target_mean": y}

        learning = LearningSpec(
            init=init,
            losses=(Loss("qf", ("q",) if shared else ("q", "imitator"), loss,
                         make_optimizer(self.lr, self.grad_clip)),),
            targets={"target_q": "q"}, tau=1.0,
            target_update_period=self.target_update_interval)
        acting = ActingSpec(act=lambda params, obs: constrained(*heads(params, obs)),
                            dist=categorical(n), policy_network="q")
        return AlgorithmSpec(learning, acting, DataSpec(columns=Q_COLUMNS))
