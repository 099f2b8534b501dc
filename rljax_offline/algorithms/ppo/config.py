"""PPO (Schulman et al. 2017, "Proximal Policy Optimization Algorithms"), as RLlib has it.

The learner: a policy and a value network (`model_config`'s `vf_share_layers`: False, our
dict default, gives each its own encoder; True, RLlib's `DefaultModelConfig` default, puts a
linear value head on the policy's encoder, trained by both losses: `models.actor_critic`),
one optimizer over both (`default_optimizer`) and, per example,

    -min(r * A, clip(r, 1 - clip_param, 1 + clip_param) * A)
    + vf_loss_coeff * min((V(s) - value_target)**2, vf_clip_param)
    - entropy_coeff * entropy + curr_kl_coeff * kl

with `r = exp(logp - action_logp)` against the sampling policy's log-probability. `kl` is the
per-sample estimate `(r - 1) - log r` of KL(old || new) (non-negative, unbiased); the KL
coefficient adapts after every iteration as in RLlib (x1.5 above 2 * kl_target, x0.5 below
kl_target / 2) and lives in `TrainState.extra`, so checkpoints keep it.

Box actions outside the space's bounds: data actions outside them (RLlib records the
Gaussian's unclipped draws) have a finite plain-Gaussian log-probability, so they are learned
as they are; fine-tuning's value warm-up on offline data reads no actions. Our env runners
record the env's copy, clipped to the bounds, and its own log-probability (the Gaussian's
density at the bound: `connectors.get_actions`), so the first ratio of every row is exactly
1; RLlib records the unclipped draw with its log-probability, which leaves its data outside
the space. With `env_runners(normalize_actions=True)` the Gaussian lives in
[-1, 1] units mapped onto the bounds instead, and each action is its draw clipped into the
box with the clipped Gaussian's exact log-probability (`models.distributions.clipped_gaussian`):
the recorded actions are the env's, and the ratio is exact on them.

Advantages come from `general_advantage_estimation`, a learner-pipeline piece (RLlib's
`GeneralAdvantageEstimation`) that reads the value network from the context's params: PPO runs
the learner pipeline on each iteration's rollouts with the current params
(`rljax_offline.algorithms.ppo.algorithm.PPO`).

Recurrent policies (`use_lstm` / `use_gru`, `lstm_cell_size`, `max_seq_len`,
`lstm_use_prev_action` / `_reward`): RLlib's PPO module with `vf_share_layers=False`
(`models.actor_critic`): the policy and the value network each have their own encoder and
cell, and the module's state is `{"actor": .., "critic": ..}`, recorded as `state_out` at
every sampled step. The learner pipeline cuts each rollout chunk into `max_seq_len`
sequences with the recorded `state_in` (the initial state at an episode's start), zero
padding and a `[T]` loss mask; GAE runs on the sequences (`sequence_advantage_estimation`:
`V` unrolled from the critic's recorded state, as RLlib's `compute_values` reads
`state_in["critic"]`); the loss unrolls both networks from `state_in` and the core's masked
mean runs over valid steps only. (RLlib's new-stack default is `vf_share_layers=True`, one
shared LSTM; ours keeps PPO's separate value network, RLlib's other setting.)
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rljax_offline import spaces as sp
from rljax_offline.algorithms.config import AlgorithmConfig, ConfigError
from rljax_offline.algorithms.options import (
    boolean,
    dict_or_none,
    non_negative_float,
    non_negative_int,
    option,
    optional,
    positive_float,
    positive_int,
    probability,
)
from rljax_offline.connectors.common import num_sequences
from rljax_offline.connectors.core import Connector, stateless
from rljax_offline.learning import checkpoint as ckpt
from rljax_offline.learning.optim import make_optimizer
from rljax_offline.learning.spec import (
    ActingSpec,
    AlgorithmSpec,
    DataSpec,
    LearningSpec,
    Loss,
)
from rljax_offline.models.actor_critic import (
    ACTOR,
    CRITIC,
    actor_critic_module,
    critic,
    init_policy_and_value,
)
from rljax_offline.models.distributions import clipped_gaussian
from rljax_offline.models.networks import Network
from rljax_offline.models.policy import MODEL_CONFIG_DEFAULTS, is_recurrent, make_policy
from rljax_offline.models.recurrent import step_rows

PPO_COLUMNS = ("obs", "actions", "action_logp", "advantages", "value_targets", "vf_preds")
GLOBAL_STATE = "global_state"  # MAPPO's value input column (`ppo.centralized_value`)


def _advantages(rewards, values, next_values, ends, mask, gamma: float, lambda_: float):
    """GAE(gamma, lambda_) over `[B, T]` steps, backwards in time; 0 where `mask` is False.
    `next_values` is the value after each step (ignored where `ends`: terminated)."""
    deltas = rewards.astype(values.dtype) + gamma * jnp.where(ends, 0.0, next_values) - values
    deltas = jnp.where(mask, deltas, 0.0)

    def back(carry, x):
        delta, m = x
        adv = jnp.where(m, delta + gamma * lambda_ * carry, 0.0)
        return adv, adv

    _, adv = jax.lax.scan(back, jnp.zeros(values.shape[0], values.dtype),
                          (deltas.T, mask.T), reverse=True)
    return adv.T


def _value_params(ctx):
    """The params `V` reads (the whole params: a shared-layers value head reads the
    policy's trunk too)."""
    if ctx.params is None or "value" not in ctx.params:
        raise ValueError("general_advantage_estimation reads the value network from the "
                         "context: run the pipeline with Context(params=...)")
    return ctx.params


def _gae_columns(adv, values, mask, shape) -> dict:
    targets = jnp.where(mask, adv + values, 0.0)
    out = {"advantages": adv, "value_targets": targets, "vf_preds": values}
    return {k: jax.lax.stop_gradient(v.reshape(shape)) for k, v in out.items()}


def general_advantage_estimation(gamma: float, lambda_: float, value: Network,
                                  value_input: str = "obs") -> Connector:
    """Learner piece: `advantages` (GAE(gamma, lambda_)) and `value_targets` (advantages +
    V(s)) per step, from `V` of `value` (`models.actor_critic.critic`, which reads the whole
    `ctx.params`). The value after
    an episode's last step is `V(new_obs)` unless the episode terminated (a truncated or cut
    episode bootstraps). Advantages are not standardized here: that is over the whole train
    batch (see `standardize`). `value_input`: the column `V` reads, its next-step column
    `new_<value_input>` (MAPPO: `global_state`, `new_global_state`)."""

    def apply(episodes, batch, ctx):
        B, T = episodes.batch_size, episodes.max_len
        v_params = _value_params(ctx)
        mask = batch["loss_mask"].reshape(B, T)
        values = value.apply(v_params, batch[value_input]).reshape(B, T)
        next_values = value.apply(v_params, batch[f"new_{value_input}"]).reshape(B, T)
        adv = _advantages(batch["rewards"].reshape(B, T), values, next_values,
                          batch["terminateds"].reshape(B, T), mask, gamma, lambda_)
        return episodes, {**batch, **_gae_columns(adv, values, mask, (B * T,))}

    return stateless(apply)


def sequence_advantage_estimation(gamma: float, lambda_: float, value: Network,
                                  max_seq_len: int) -> Connector:
    """Sequence piece (after `add_states` / `add_time_dim`) for a recurrent value network:
    GAE as `general_advantage_estimation`, with `V(s)` unrolled over each `max_seq_len`
    sequence from the critic's recorded state (`state_in["critic"]`, the state the sampler
    carried to that step; the initial state at an episode's start), so it equals one
    unroll over the whole episode. Each step's next value is the next step's `V` (the same
    estimate that step is judged by); after a chunk's last step, the bootstrap `V(new_obs)`
    comes from the same unroll carried one step further (zero where the episode
    terminated). Columns stay `[num_sequences, max_seq_len]`, zero on padding."""
    S = int(max_seq_len)

    def apply(episodes, batch, ctx):
        v_params = _value_params(ctx)
        B, K = episodes.batch_size, num_sequences(episodes.max_len, S)
        feats, next_feats = value.steps(v_params, batch, with_next=True,
                                        state_in=batch["state_in"][CRITIC])
        # [B * K, S] sequences -> each episode's timeline [B, K * S] (padding at its end)
        timeline = lambda x: x.reshape(B, K * S)
        values = timeline(value.head(v_params, feats))
        after_last = timeline(value.head(v_params, next_feats))
        last = jnp.arange(K * S)[None, :] == (episodes.lengths[:, None] - 1)
        next_values = jnp.where(last, after_last, jnp.roll(values, -1, axis=1))
        mask = timeline(batch["loss_mask"])
        adv = _advantages(timeline(batch["rewards"]), values, next_values,
                          timeline(batch["terminateds"]), mask, gamma, lambda_)
        return episodes, {**batch, **_gae_columns(adv, values, mask, (B * K, S))}

    return stateless(apply)


def centralized_critic(state_spec, model_config: dict | None, recurrent: bool) -> Network:
    """MAPPO's value network: `critic` on the global state, reading the batch's
    `global_state` column where the loss passes it `obs` (feed-forward, its own layers).

    Args:
      state_spec: the global state's spec.
      model_config: RLlib's model-config keys.
      recurrent: whether the policy is recurrent (refused: a named error).
    """
    if recurrent or (model_config or {}).get("vf_share_layers"):
        raise ConfigError("centralized_value=True (MAPPO) needs a feed-forward value network "
                          "of its own: set model_config vf_share_layers=False and no "
                          "use_lstm / use_gru")
    value = critic(state_spec, model_config)

    def steps(params, batch, with_next=False, state_in=None):
        return value.steps(params, {**batch, "obs": batch[GLOBAL_STATE]}, with_next, state_in)

    return value._replace(steps=steps)


def standardize(x, mask=None, eps: float = 1e-8):
    """Zero mean, unit variance over the train batch's valid steps (RLlib standardizes
    advantages over the batch); 0 on padding (`mask` False)."""
    x = np.asarray(x)
    if mask is None:
        return (x - x.mean()) / (x.std() + eps)
    mask = np.asarray(mask, bool)
    valid = x[mask]
    mean, std = (valid.mean(), valid.std()) if valid.size else (0.0, 0.0)
    return np.where(mask, (x - mean) / (std + eps), 0.0).astype(x.dtype)


def _network_state(batch: dict, part: str):
    """One network's `state_in` of an actor-critic batch (None for feed-forward batches)."""
    return batch["state_in"][part] if "state_in" in batch else None


@dataclasses.dataclass(frozen=True)
class PPOConfig(AlgorithmConfig):
    """PPO with RLlib's parameter names and defaults (new API stack).

    Example (RLlib's guide: a CartPole expert to record from):
        >>> from rljax_offline import PPOConfig
        >>> config = (PPOConfig().environment("CartPole-v1")
        ...           .env_runners(num_envs_per_env_runner=8)
        ...           .training(lr=3e-4, num_epochs=6, vf_loss_coeff=0.01))
        >>> algo = config.build()
        >>> result = algo.train()
        >>> result["env_runners"]["episode_return_mean"]  # doctest: +SKIP
    """

    algorithm_class = "rljax_offline.algorithms.ppo.algorithm:PPO"
    multi_agent_class = "rljax_offline.algorithms.ppo.multi_module:multi_agent_ppo"
    algo_name = "ppo"
    trains_online = True

    lr: float = option(5e-5, "training", positive_float, "learning rate")
    train_batch_size_per_learner: int = option(
        4000, "training", positive_int, "env steps sampled per iteration (the train batch)")
    lambda_: float = option(1.0, "training", probability, "GAE lambda")
    clip_param: float = option(0.3, "training", positive_float, "PPO's ratio clip")
    vf_clip_param: float = option(10.0, "training", positive_float,
                                  "the squared value error is clipped at this")
    vf_loss_coeff: float = option(1.0, "training", non_negative_float, "value loss weight")
    entropy_coeff: float = option(0.0, "training", non_negative_float, "entropy bonus")
    use_kl_loss: bool = option(True, "training", boolean, "add the adaptive KL penalty")
    kl_coeff: float = option(0.2, "training", non_negative_float, "initial KL coefficient")
    kl_target: float = option(0.01, "training", positive_float, "KL the coefficient aims at")
    num_epochs: int = option(30, "training", positive_int, "passes over each train batch")
    minibatch_size: int = option(128, "training", positive_int,
                                 "rows of one update, over all devices")
    init_policy_from: str | None = option(
        None, "training", None, "a checkpoint of any registered algorithm (BC, MARWIL, CQL, "
        "IQL, ...) whose policy weights PPO starts from (fine-tuning)")
    value_warmup_updates: int = option(
        500, "training", non_negative_int, "when fine-tuning: value-network updates on the "
        "offline data's returns-to-go before the first PPO update")
    value_warmup_lr: float = option(3e-3, "training", positive_float,
                                    "learning rate of the value warm-up")
    # MAPPO (Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative Multi-Agent
    # Games"): RLlib has no such option. Named for what it changes, the value function
    # (`vf_*` options, RLlib's spelling "centralized"), not the algorithm, so one config
    # class holds IPPO and MAPPO and the option reads as the one difference between them.
    centralized_value: bool = option(
        False, "training", boolean, "multi-agent (MAPPO): every module's value network reads "
        "the global state at the agent's env step (the env's state(), else every agent's "
        "observation concatenated in agent order) instead of the agent's observation; the "
        "actors stay decentralised")
    num_envs_per_env_runner: int = option(1, "env_runners", positive_int,
                                          "vectorised envs sampled together")
    # RLlib's name and idea (its default is True; ours False keeps the plain Gaussian on the
    # env's scale): the policy acts in [-1, 1] units, mapped onto the bounds. Where RLlib
    # records the module's raw actions, ours are the env's (inside the box) with their
    # clipped-Gaussian log-probability (`models.distributions.clipped_gaussian`), so PPO's
    # ratio and any data recorded stay in the env's action space.
    normalize_actions: bool = option(
        False, "env_runners", boolean, "Box actions: the Gaussian lives in [-1, 1] units "
        "mapped onto the bounds (a fresh policy acts around the box's centre), actions "
        "clipped to the box with their exact clipped-Gaussian log-probability")
    evaluation_interval: int = option(0, "evaluation", non_negative_int,
                                      "evaluate every N iterations (0: never; the sampling "
                                      "episodes are reported under env_runners)")
    model_config: dict = option({"fcnet_hiddens": [256, 256], "fcnet_activation": "tanh"},
                                "rl_module", dict_or_none, "RLlib's model-config keys")

    def validate(self) -> None:
        super().validate()
        model = self.model_config or {}
        if is_recurrent(model):
            seq_len = int(model.get("max_seq_len", MODEL_CONFIG_DEFAULTS["max_seq_len"]))
            if self.minibatch_size < seq_len:
                raise ConfigError(f"{type(self).__name__}: minibatch_size="
                                  f"{self.minibatch_size} is smaller than max_seq_len="
                                  f"{seq_len}: a minibatch would hold less than one sequence")
        if self.minibatch_size > self.train_batch_size_per_learner:
            raise ConfigError(f"{type(self).__name__}: minibatch_size={self.minibatch_size} is "
                              f"larger than train_batch_size_per_learner="
                              f"{self.train_batch_size_per_learner}")
        if self.normalize_actions and self.init_policy_from is not None:
            raise ConfigError(f"{type(self).__name__}: normalize_actions=True reads the "
                              "policy's outputs in [-1, 1] units; a policy from "
                              "init_policy_from was trained on the env's scale")
        check = optional(lambda v: None if isinstance(v, str) else "a checkpoint path")
        expected = check(self.init_policy_from)
        if expected is not None:
            raise ConfigError(f"{type(self).__name__}: init_policy_from must be {expected}, "
                              f"got {self.init_policy_from!r}")

    def make_spec(self, obs_spec, act_spec, value_input=None) -> AlgorithmSpec:
        """PPO's spec. Recurrent (`use_lstm` / `use_gru`): the policy and the value network
        are recurrent with their own cells (`actor_critic_module`), the train rows are
        `max_seq_len` sequences, GAE runs on them (`sequence_advantage_estimation`) and the
        loss unrolls both networks from the sequences' recorded `state_in`.

        Args:
          obs_spec: the policy's observation spec (after the learner pipeline's pieces).
          act_spec: the action spec.
          value_input: MAPPO's global-state spec: the value network reads the column
            `global_state` (and GAE `new_global_state`) instead of `obs`; None: `obs`.
        """
        self.check_spaces(obs_spec, act_spec)
        policy = make_policy(obs_spec, act_spec, **self.model_config)
        if self.normalize_actions and isinstance(sp.to_spec(act_spec), sp.BoxSpec):
            policy = policy._replace(dist=clipped_gaussian(act_spec))
        value = (critic(obs_spec, self.model_config) if value_input is None
                 else centralized_critic(value_input, self.model_config, policy.is_stateful))
        module = actor_critic_module(policy, value) if policy.is_stateful else None
        optimizer = make_optimizer(self.lr, self.grad_clip)
        clip, vf_clip = self.clip_param, self.vf_clip_param
        vf_coeff, ent_coeff, use_kl = self.vf_loss_coeff, self.entropy_coeff, self.use_kl_loss

        init = init_policy_and_value(policy, value)

        def prepare(params, extra, batch, rng, axis):
            coeff = jnp.broadcast_to(extra["curr_kl_coeff"], batch["loss_mask"].shape)
            return {**batch, "kl_coeff": coeff}, extra

        def loss(params, batch, rng, axis):
            actor_batch = batch if module is None else {
                **batch, "state_in": _network_state(batch, ACTOR)}
            inputs, _ = policy.steps(params["policy"], actor_batch)
            logp = policy.dist.logp(inputs, step_rows(batch, "actions"))
            log_ratio = logp - step_rows(batch, "action_logp")
            ratio = jnp.exp(log_ratio)
            adv = step_rows(batch, "advantages")
            surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip, 1 + clip) * adv)
            features, _ = value.steps(params, batch, state_in=_network_state(batch, CRITIC))
            vf = value.head(params, features)
            vf_loss = jnp.minimum((vf - step_rows(batch, "value_targets")) ** 2, vf_clip)
            entropy = policy.dist.entropy(inputs)
            kl = (ratio - 1.0) - log_ratio
            total = -surrogate + vf_coeff * vf_loss - ent_coeff * entropy
            if use_kl:
                total = total + step_rows(batch, "kl_coeff") * kl
            return total, {"policy_loss": -surrogate, "vf_loss": vf_loss, "entropy": entropy,
                           "mean_kl_loss": kl, "total_loss": total,
                           "clip_fraction": (jnp.abs(ratio - 1) > clip).astype(jnp.float32)}

        learning = LearningSpec(
            init=init, prepare=prepare,
            losses=(Loss("default_optimizer", ("policy", "value"), loss, optimizer),),
            extra_init={"curr_kl_coeff": np.float32(self.kl_coeff)})
        act = lambda params, obs: policy.apply(params["policy"], obs)
        if module is None:
            acting = ActingSpec(act=act, dist=policy.dist)
            column = "obs" if value_input is None else GLOBAL_STATE
            data = DataSpec(columns=tuple(dict.fromkeys((*PPO_COLUMNS, column))),
                            learner_connector=(general_advantage_estimation(
                                self.gamma, self.lambda_, value, column),))
        else:
            acting = ActingSpec(act=act, dist=policy.dist, policy=module, policy_network=None)
            data = DataSpec(columns=PPO_COLUMNS, sequence_connector=(
                sequence_advantage_estimation(self.gamma, self.lambda_, value,
                                              policy.max_seq_len),))
        return AlgorithmSpec(learning, acting, data)

    def value_warmup_spec(self, obs_spec) -> AlgorithmSpec:
        """The value network alone, regressing the offline data's discounted returns
        (MARWIL's targets: `returns_to_go + bootstrap_discount * V(bootstrap_obs)`): run
        before fine-tuning so PPO's first advantages are not against an untrained V. Its
        params are `{"policy", "value"}` and only `value` is optimized: with shared layers
        the head fits on the cloned policy's frozen trunk, so the policy starts unchanged."""
        if is_recurrent(self.model_config or {}):
            raise ConfigError(f"{type(self).__name__}: the value warm-up fits a feed-forward "
                              "value network; for a recurrent policy set "
                              "value_warmup_updates=0")
        value = critic(obs_spec, self.model_config)

        def loss(params, batch, rng, axis):
            boot = value.apply(params, batch["bootstrap_obs"])
            target = jax.lax.stop_gradient(batch["returns_to_go"]
                                           + batch["bootstrap_discount"] * boot)
            vf_loss = 0.5 * (value.apply(params, batch["obs"]) - target) ** 2
            return vf_loss, {"vf_loss": vf_loss}

        learning = LearningSpec(init=lambda rng: {"value": value.init(rng)},
                                losses=(Loss("value_warmup", ("value",), loss,
                                             optax.adam(self.value_warmup_lr)),))
        return AlgorithmSpec(learning, None, DataSpec(
            columns=("obs", "returns_to_go", "bootstrap_discount", "bootstrap_obs")))

    @property
    def update_batch_size(self) -> int:
        """PPO's updates take minibatches; the train batch is the sampled rollout."""
        return self.minibatch_size

    def build(self):
        """The online `PPO` algorithm. Fine-tuning (`init_policy_from`) takes the
        checkpoint's `model_config` (its weights fix the architecture) and, where no
        `input_` is set, the checkpoint's offline data for the value warm-up; then starts
        from its policy (`PPO.fine_tune_from`). The built algorithm's config names no
        checkpoint: its own checkpoints hold the started-from weights, so restoring one
        does not need (or re-read) the original. Multi-agent: each module starts from the
        checkpoint's module of the same id (`ppo.multi_agent_fine_tuning`), with
        `value_warmup_updates=0`. `centralized_value=True` needs
        `multi_agent()` (a one-line `ConfigError` otherwise)."""
        if self.centralized_value and not self.is_multi_agent:
            raise ConfigError(f"{type(self).__name__}: centralized_value=True (MAPPO) is a "
                              "multi-agent option: call multi_agent(...) too")
        if self.init_policy_from is None:
            return AlgorithmConfig.build(self)
        saved = ckpt.load_meta(self.init_policy_from).get("config", {})
        changes = {"model_config": saved.get("model_config", self.model_config),
                   "init_policy_from": None}
        if self.is_multi_agent:  # `ppo.multi_agent_fine_tuning`: no value warm-up yet
            if self.value_warmup_updates:
                raise ConfigError(f"{type(self).__name__}.multi_agent(): fine-tuning "
                                  "several agents starts the value networks fresh (no value "
                                  "warm-up on multi-agent data yet): set "
                                  "value_warmup_updates=0")
        elif self.input_ is None and saved.get("input_") is not None:
            changes["input_"] = saved["input_"]
        algo = AlgorithmConfig.build(dataclasses.replace(self, **changes))
        algo.fine_tune_from(self.init_policy_from)
        return algo
