"""MARWIL (Wang et al. 2018, "Exponentially Weighted Imitation Learning"), as RLlib has it.

The policy imitates the data weighted by `exp(beta * A / sqrt(m))`, where `A` are advantages
against a learned value function and `m` a moving average of `A**2`; `beta=0` is behavior
cloning (RLlib's `BCConfig` is MARWIL with `beta=0`, and so is ours). The value function
regresses the discounted returns (GAE with `lambda_=1`, as RLlib's MARWIL learner pipeline),
bootstrapped with `V` of the last observation where an episode was cut rather than ended.

Where RLlib computes the value predictions once per batch in its learner pipeline, here they
are computed inside the jitted update, every step, with the current value network:
the learner pipeline only adds what does not depend on the networks (`returns_to_go`,
`bootstrap_discount`, `bootstrap_obs`).

With `vf_share_layers=True` in `model_config` the value function is a linear head on the
policy's encoder (`models.actor_critic.critic`), as in RLlib; the policy network is the same
either way, so BC (`beta=0`, no value head) takes any model config a MARWIL or PPO run used.

Loss (one optimizer over policy and value, RLlib's `default_optimizer`):
`policy_loss + vf_coeff * vf_loss`, with `policy_loss = -w * logp(a|s)` and
`vf_loss = 0.5 * (V(s) - value_target)**2`.

Box actions outside the space's bounds (RLlib records a Gaussian policy's unclipped samples)
are learned as they are, as RLlib's MARWIL and BC do: the plain diagonal Gaussian's
log-probability is finite everywhere, so the policy fits the recorded action distribution
(acting clips its samples to the bounds before the env sees them).

Recurrent policies (`use_lstm` / `use_gru`): the value network is recurrent too, with the same
model config (its own encoder and cell, as RLlib's separate actor and critic encoders); the
policy unrolls from the batch's `state_in`, the value network from its initial state at each
`max_seq_len` sequence. The bootstrap value of a cut episode is `V` unrolled from its initial
state over the episode's last `max_seq_len` observations, the final one included (the history
any state of the training sequences has at most), carried per sequence as `bootstrap_obs`
`[S, ...]` with `bootstrap_seq_lens`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from rljax_offline import spaces as sp
from rljax_offline.algorithms.config import AlgorithmConfig, ConfigError
from rljax_offline.algorithms.options import non_negative_float, option, positive_float, probability
from rljax_offline.connectors.common import expand, latest, num_sequences
from rljax_offline.connectors.core import Connector, stateless
from rljax_offline.learning.optim import make_optimizer
from rljax_offline.learning.spec import (
    ActingSpec,
    AlgorithmSpec,
    DataSpec,
    LearningSpec,
    Loss,
)
from rljax_offline.models.actor_critic import critic
from rljax_offline.models.networks import Network
from rljax_offline.models.policy import make_policy
from rljax_offline.models.recurrent import step_rows


def add_returns_to_go(gamma: float, bootstrap_obs: bool = True) -> Connector:
    """Learner piece: per step, the discounted return to the end of the recorded episode
    (`returns_to_go`), the discount `gamma**(steps left)` of the bootstrap value where the
    episode did not terminate (`bootstrap_discount`, 0 where it did), and the observation to
    bootstrap from (`bootstrap_obs`, the episode's last; left out with `bootstrap_obs=False`,
    where `add_bootstrap_window` gives it per sequence). With `V` of that observation,
    `returns_to_go + bootstrap_discount * V` is RLlib's GAE value target at `lambda_=1`."""

    def apply(episodes, batch, ctx):
        T = episodes.max_len
        mask = episodes.mask
        rewards = jnp.where(mask, episodes.steps(episodes.rewards), 0.0).astype(jnp.float32)

        def back(carry, r):
            carry = r + gamma * carry
            return carry, carry

        _, rtg = jax.lax.scan(back, jnp.zeros(rewards.shape[0], jnp.float32), rewards.T,
                              reverse=True)
        left = episodes.lengths[:, None] - jnp.arange(T)[None, :]
        cont = (~episodes.terminated)[:, None] & mask
        discount = jnp.where(cont, jnp.power(gamma, left.astype(jnp.float32)), 0.0)
        B = rewards.shape[0]
        out = {"returns_to_go": rtg.T.reshape(B * T),
               "bootstrap_discount": discount.reshape(B * T)}
        if bootstrap_obs:
            last = latest(episodes.observations, episodes)
            out["bootstrap_obs"] = jax.tree_util.tree_map(
                lambda x: jnp.broadcast_to(x[:, None], (B, T, *x.shape[1:])).reshape(
                    B * T, *x.shape[1:]), last)
        return episodes, {**batch, **out}

    return stateless(apply)


def add_bootstrap_window(max_seq_len: int) -> Connector:
    """Sequence piece (after the time dimension): per sequence of `max_seq_len` steps, the
    last `max_seq_len` observations of its episode up to the final one (`bootstrap_obs`
    `[B * K, S, ...]`, right zero-padded) and how many are real (`bootstrap_seq_lens`), so a
    recurrent value network can value the final observation with a history."""
    S = int(max_seq_len)

    def apply(episodes, batch, ctx):
        L, T = episodes.len_lookback_buffer, episodes.max_len
        K = num_sequences(T, S)
        count = jnp.minimum(episodes.lengths + 1, S)  # observations 0..length of the episode
        cols = (L + episodes.lengths + 1 - count)[:, None] + jnp.arange(S)[None, :]
        valid = jnp.arange(S)[None, :] < count[:, None]

        def window(x):
            picked = jnp.take_along_axis(x, expand(jnp.clip(cols, 0, x.shape[1] - 1), x),
                                         axis=1)
            picked = jnp.where(expand(valid, picked), picked, jnp.zeros((), picked.dtype))
            return jnp.repeat(picked, K, axis=0)

        return episodes, {**batch,
                          "bootstrap_obs": jax.tree_util.tree_map(window,
                                                                  episodes.observations),
                          "bootstrap_seq_lens": jnp.repeat(count, K).astype(jnp.int32)}

    return stateless(apply)


def bootstrap_values(value: Network, params, batch: dict) -> jax.Array:
    """`V(bootstrap_obs)` per step as rows `[N]`: a feed-forward `V` of the flat column; a
    recurrent one unrolled from its initial state over each sequence's window
    (`add_bootstrap_window`), its output at the window's last real step, for every step of
    the sequence."""
    if not value.is_stateful:
        return value.apply(params, batch["bootstrap_obs"])
    window, lens = batch["bootstrap_obs"], batch["bootstrap_seq_lens"]
    B = lens.shape[0]
    feats, _ = value.forward(params, {"obs": window, "state_in": value.initial_state(B),
                                      "seq_lens": lens})
    last = jnp.take_along_axis(feats, jnp.maximum(lens - 1, 0)[:, None, None], axis=1)[:, 0]
    v = value.head(params, last)
    T = batch["loss_mask"].shape[1]
    return jnp.repeat(v, T)


@dataclasses.dataclass(frozen=True)
class MARWILConfig(AlgorithmConfig):
    """MARWIL with RLlib's parameter names and defaults."""

    algo_name = "marwil"

    lr: float = option(1e-4, "training", positive_float, "learning rate")
    beta: float = option(1.0, "training", non_negative_float,
                         "advantage weighting temperature; 0 is behavior cloning")
    vf_coeff: float = option(1.0, "training", non_negative_float, "weight of the value loss")
    bc_logstd_coeff: float = option(0.0, "training", non_negative_float,
                                    "bonus on the Gaussian log-std (more exploration)")
    moving_average_sqd_adv_norm_update_rate: float = option(
        1e-8, "training", probability, "update rate of the squared-advantage moving average")
    moving_average_sqd_adv_norm_start: float = option(
        100.0, "training", positive_float, "its starting value")
    lambda_: float = option(1.0, "training", probability,
                            "GAE lambda (MARWIL uses 1: Monte-Carlo returns)")

    def validate(self) -> None:
        super().validate()
        if self.lambda_ != 1.0:
            raise ConfigError(f"{type(self).__name__}: lambda_ must be 1.0 (MARWIL's value "
                              f"targets are discounted returns), got {self.lambda_!r}")

    def make_spec(self, obs_spec, act_spec) -> AlgorithmSpec:
        self.check_spaces(obs_spec, act_spec)
        policy = make_policy(obs_spec, act_spec, **self.model_config)
        optimizer = make_optimizer(self.lr, self.grad_clip)
        acting = ActingSpec(act=lambda params, obs: policy.apply(params["policy"], obs),
                            dist=policy.dist, policy=policy)
        if self.beta == 0.0:
            return _bc_spec(policy, optimizer, acting, self.bc_logstd_coeff)
        value = critic(obs_spec, self.model_config)
        recurrent = policy.is_stateful
        beta, rate, vf_coeff = self.beta, self.moving_average_sqd_adv_norm_update_rate, \
            self.vf_coeff
        logstd_coeff = self.bc_logstd_coeff

        def init(rng):
            k1, k2 = jax.random.split(rng)
            return {"policy": policy.init(k1), "value": value.init(k2)}

        def values(params, batch):
            return value.head(params, value.steps(params, batch)[0])

        def prepare(params, extra, batch, rng, axis):
            mask = step_rows(batch, "loss_mask")
            targets = step_rows(batch, "returns_to_go") + step_rows(
                batch, "bootstrap_discount") * bootstrap_values(value, params, batch)
            adv = targets - values(params, batch)
            norm = extra["moving_avg_sqd_adv_norm"]
            norm = norm + rate * (axis.mean(adv**2, mask) - norm)
            weights = jnp.exp(beta * adv / (1e-8 + jnp.sqrt(norm)))
            batch = {**batch, "value_targets": jax.lax.stop_gradient(targets),
                     "advantage_weights": jax.lax.stop_gradient(weights)}
            return batch, {**extra, "moving_avg_sqd_adv_norm": norm}

        def loss(params, batch, rng, axis):
            inputs, _ = policy.steps(params["policy"], batch)
            logp = policy.dist.logp(inputs, step_rows(batch, "actions"))
            policy_loss = -batch["advantage_weights"] * logp - logstd_coeff * _log_std(
                policy, inputs)
            vf = values(params, batch)
            vf_loss = 0.5 * (vf - batch["value_targets"]) ** 2
            total = policy_loss + vf_coeff * vf_loss
            return total, {"policy_loss": policy_loss, "vf_loss": vf_loss,
                           "total_loss": total, "mean_advantage_weight":
                           batch["advantage_weights"],
                           "entropy": policy.dist.entropy(inputs)}

        learning = LearningSpec(
            init=init, prepare=prepare,
            losses=(Loss("default_optimizer", ("policy", "value"), loss, optimizer),),
            extra_init={"moving_avg_sqd_adv_norm": jnp.float32(
                self.moving_average_sqd_adv_norm_start)})
        data = DataSpec(
            columns=("obs", "actions", "returns_to_go", "bootstrap_discount",
                     "bootstrap_obs") + (("bootstrap_seq_lens",) if recurrent else ()),
            learner_connector=(add_returns_to_go(self.gamma, bootstrap_obs=not recurrent),),
            sequence_connector=((add_bootstrap_window(policy.max_seq_len),)
                                if recurrent else ()))
        return AlgorithmSpec(learning, acting, data)


def _log_std(policy, inputs):
    """Summed Gaussian log-std of `action_dist_inputs` (0 for categorical policies)."""
    if not isinstance(policy.act_spec, sp.BoxSpec):
        return jnp.zeros(inputs.shape[:-1])
    return jnp.sum(jnp.split(inputs, 2, axis=-1)[1], axis=-1)


def _bc_spec(policy, optimizer, acting: ActingSpec, logstd_coeff: float) -> AlgorithmSpec:
    """MARWIL at beta=0: the negative log-likelihood of the data's actions, no value net."""

    def loss(params, batch, rng, axis):
        inputs, _ = policy.steps(params["policy"], batch)
        nll = -policy.dist.logp(inputs, step_rows(batch, "actions")) - logstd_coeff * _log_std(
            policy, inputs)
        return nll, {"policy_loss": nll, "total_loss": nll,
                     "entropy": policy.dist.entropy(inputs)}

    learning = LearningSpec(init=lambda rng: {"policy": policy.init(rng)},
                            losses=(Loss("default_optimizer", ("policy",), loss, optimizer),))
    return AlgorithmSpec(learning, acting, DataSpec())
