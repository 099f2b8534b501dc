"""Decision Transformer (Chen et al. 2021, "Decision Transformer: Reinforcement Learning via
Sequence Modeling"), for Box (`DecisionTransformerConfig`) and Discrete
(`DiscreteDecisionTransformerConfig`) actions: a causal transformer over windows of
(return-to-go, observation, action) tokens of the data's episodes, trained by supervised
loss to predict each step's action, and conditioned at acting time on a target return.

With `R_t = sum_{t' >= t} r_{t'}` the undiscounted return-to-go of step `t` (scaled by
`return_scale`), `pi(. | R_{<=t}, s_{<=t}, a_{<t})` the network (`models.transformer`) on a
context of at most `context_size` steps:

* Box: `L = mean_t sum_d (tanh(f_t) - u(a_t))_d^2`, `u` the action scaled into `[-1, 1]` by
  the space's bounds (d3rlpy regresses raw actions into a tanh output; scaled, any bounded
  Box fits);
* Discrete: `L = mean_t -log softmax(f_t)[a_t]`;
* acting: the context holds the episode's last `context_size` steps; the first step's
  return-to-go is `target_return` (times `return_scale`) and each later one is the previous
  minus the reward received, `R_{t+1} = R_t - r_t` (d3rlpy's `StatefulTransformerWrapper`);
  the action is the network's greedy output at the current state token.

On the engine: the policy is a stateful `Module` (`max_seq_len = context_size`). Each update
trains on `train_batch_size_per_learner / context_size` windows of `context_size` steps,
each ending at a step drawn uniformly from the data (`sample_unit="windows"`, the default, as
d3rlpy samples them: every step is trained with as much context as acting gives it), or
with `sample_unit="timesteps"` on the fixed sequences RLlib's `AddTimeDimToBatchAndZeroPad`
cuts from each episode's first step (as for recurrent policies); the losses read `obs`,
`actions`, `returns_to_go` and `timesteps` `[B, T]`; the state the acting pipeline carries is
the context itself (observations, actions, returns-to-go and timesteps of the last
`context_size` steps, the step count and the return still to get). The reward and the action
of the previous step reach the policy as RLlib's `PrevActionsPrevRewards` does (the config puts
`connectors.prev_actions_rewards(1, 1)` after the user's pieces of both pipelines): they are
part of each observation token. A flat batch (rows without a time axis) is read as sequences
of one step.

Defaults are d3rlpy 2.8's under its names where RLlib has none: Box: `context_size=20`,
`max_timestep=1000`, batch 64 sequences (`train_batch_size_per_learner=1280` timesteps), `lr`
1e-4 (d3rlpy's `learning_rate`), 1 head, 3 layers, dropouts 0.1, ReLU, "simple" position
encoding; Discrete: batch 128 sequences (2560 timesteps), `lr` 6e-4, 8 heads, 6 layers, GELU,
tanh on the embeddings, "global" position encoding, and the linear warm-up over
`warmup_tokens` then cosine decay to `final_tokens` (floor 0.1) of the rate, counting
`train_batch_size_per_learner` tokens an update. Encoder: the MLP of `fcnet_hiddens` (d3rlpy's
256-256 ReLU), its last width the embedding width. Adam without gradient clipping (d3rlpy's
default optimizer; its reproduction scripts set `grad_clip=0.25`, our `grad_clip`).
`return_scale` (default 1, d3rlpy's no reward scaler) multiplies returns-to-go.

Refused: the other action space (use the other config), an unbounded Box, a recurrent model
config (the transformer is the sequence model), `target_return=None` (the return to condition
on has no default, as in d3rlpy), and a `num_heads` that does not divide the embedding width.
Off-policy evaluation refuses it (a stateful policy, `ope.evaluation`).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from rljax_offline import spaces as sp
from rljax_offline.algorithms.actor_critic_base import D3RLPY_MODEL
from rljax_offline.algorithms.config import AlgorithmConfig, ConfigError
from rljax_offline.algorithms.marwil import add_returns_to_go
from rljax_offline.algorithms.options import (
    any_float,
    dict_or_none,
    non_negative_int,
    one_of,
    option,
    optional,
    positive_float,
    positive_int,
    probability,
)
from rljax_offline.connectors.common import flat
from rljax_offline.connectors.core import pipeline, stateless
from rljax_offline.connectors.env_to_module import prev_actions_rewards
from rljax_offline.learning.spec import ActingSpec, AlgorithmSpec, DataSpec, LearningSpec, Loss
from rljax_offline.models.actor_and_q import check_bounded
from rljax_offline.models.distributions import action_scaler, categorical, deterministic
from rljax_offline.models.module import policy_module
from rljax_offline.models.policy import check_model_config, is_recurrent, observation_encoder
from rljax_offline.models.transformer import ACTIVATIONS, DecisionTransformerNet, causal_outputs

__all__ = ["DecisionTransformerConfig", "DiscreteDecisionTransformerConfig",
           "add_timesteps"]


def add_timesteps():
    """Learner piece: `timesteps`, each step's 0-based timestep since its episode's reset
    (`t_started` plus its index), int32 rows."""

    def apply(episodes, batch, ctx):
        t = episodes.t_started[:, None] + jnp.arange(episodes.max_len)[None, :]
        t = jnp.where(episodes.mask, t, 0).astype(jnp.int32)
        return episodes, {**batch, "timesteps": flat(t)}

    return stateless(apply)


def _lr_schedule(lr: float, tokens_per_update: int, warmup: int, final: int):
    """d3rlpy's token schedule: linear warm-up over `warmup` tokens, then cosine decay to
    `final` tokens, floored at 0.1 of `lr` (tokens counted before the update, plus its own)."""

    def schedule(count):
        tokens = (count + 1).astype(jnp.float32) * tokens_per_update
        warm = tokens / max(1, warmup)
        progress = (tokens - warmup) / max(1, final - warmup)
        cosine = jnp.maximum(0.1, 0.5 * (1.0 + jnp.cos(math.pi * progress)))
        return lr * jnp.where(tokens < warmup, warm, cosine)

    return schedule


@dataclasses.dataclass(frozen=True)
class _DecisionTransformerBase(AlgorithmConfig):
    """What both action spaces share (see the module docstring)."""

    discrete = False

    lr: float = option(1e-4, "training", positive_float, "learning rate (d3rlpy's "
                       "learning_rate)")
    train_batch_size_per_learner: int = option(1280, "training", positive_int,
                                               "timesteps of one update (sequences of "
                                               "context_size), over all devices")
    context_size: int = option(20, "training", positive_int,
                               "steps of one context (the learner's sequences)")
    max_timestep: int = option(1000, "training", positive_int,
                               "size of the timestep embedding table (longer clip)")
    num_heads: int = option(1, "training", positive_int, "attention heads")
    num_layers: int = option(3, "training", positive_int, "transformer blocks")
    attn_dropout: float = option(0.1, "training", probability, "dropout on attention weights")
    resid_dropout: float = option(0.1, "training", probability,
                                  "dropout before each residual sum")
    embed_dropout: float = option(0.1, "training", probability, "dropout on the embeddings")
    activation_type: str = option("relu", "training", one_of(*ACTIVATIONS),
                                  "the feed-forward layers' activation")
    embed_activation_type: str = option("identity", "training", one_of(*ACTIVATIONS),
                                        "activation on each token's embedding")
    position_encoding_type: str = option("simple", "training", one_of("simple", "global"),
                                         "timestep embedding per token, or the last one's "
                                         "plus a per-position one")
    target_return: float | None = option(None, "training", optional(any_float),
                                         "the return acting conditions on (required)")
    return_scale: float = option(1.0, "training", positive_float,
                                 "multiplier of returns-to-go (d3rlpy's reward scaler)")
    sample_unit: str = option(
        "windows", "offline_data", one_of("timesteps", "episodes", "windows"),
        "windows: context windows ending at steps drawn uniformly (d3rlpy's); timesteps: "
        "the fixed context_size sequences of each episode (RLlib's time dim)")
    model_config: dict = option(D3RLPY_MODEL, "rl_module", dict_or_none,
                                "the observation encoder (fcnet_hiddens: its last width is "
                                "the embedding width)")

    def validate(self) -> None:
        super().validate()
        name = type(self).__name__
        if is_recurrent(self.model_config or {}):
            raise ConfigError(f"{name}: the transformer is the sequence model: drop use_lstm "
                              f"/ use_gru")
        if self.max_timestep < 2:
            raise ConfigError(f"{name}: max_timestep must be >= 2, got {self.max_timestep}")

    def check_spaces(self, obs_spec, act_spec) -> None:
        name = type(self).__name__
        if self.discrete and not isinstance(act_spec, sp.DiscreteSpec):
            raise ConfigError(f"{name} needs Discrete actions (use DecisionTransformerConfig "
                              f"for Box), got {act_spec}")
        if not self.discrete:
            if not isinstance(act_spec, sp.BoxSpec):
                raise ConfigError(f"{name} needs Box actions (use "
                                  f"DiscreteDecisionTransformerConfig for Discrete), got "
                                  f"{act_spec}")
            check_bounded(act_spec, name)

    def learner_connector_pieces(self, spaces) -> list:
        # the previous step's action and reward in each observation (both pipelines): what
        # acting reads to carry its context and its return-to-go. Streamed episodes may not
        # carry their spaces: those the user's pieces give are given to the piece.
        piece, user = prev_actions_rewards(1, 1), super().learner_connector_pieces(spaces)
        given = pipeline(*user).out_spaces(spaces) if user else spaces

        def apply(state, episodes, batch, ctx):
            if episodes.action_space_spec is None:
                episodes = episodes.replace(action_space_spec=given.action)
            if episodes.observation_space_spec is None:
                episodes = episodes.replace(observation_space_spec=given.observation)
            return piece.apply(state, episodes, batch, ctx)

        return [*user, piece._replace(apply=apply)]

    def _optimizer(self) -> optax.GradientTransformation:
        adam = optax.adam(self.lr)
        return optax.chain(optax.clip_by_global_norm(self.grad_clip), adam) \
            if self.grad_clip else adam

    def make_spec(self, obs_spec, act_spec) -> AlgorithmSpec:
        self.check_spaces(obs_spec, act_spec)
        name = type(self).__name__
        if self.target_return is None:
            raise ConfigError(f"{name}: set target_return, the return acting conditions on "
                              f"(.training(target_return=...))")
        cfg = check_model_config(self.model_config or {})
        encoder, _, _ = observation_encoder(obs_spec, cfg)
        hiddens = [int(h) for h in cfg["fcnet_hiddens"]]
        obs_dim = int(sp.flat_dim(obs_spec))
        width = hiddens[-1] if hiddens else obs_dim
        if width % self.num_heads:
            raise ConfigError(f"{name}: num_heads={self.num_heads} must divide the embedding "
                              f"width {width} (the last of fcnet_hiddens)")
        if self.discrete:
            n, start = int(act_spec.n), int(getattr(act_spec, "start", 0) or 0)
            act_dim, dist = n, categorical(n, start)

            def tokens(actions):
                return jax.nn.one_hot(actions.astype(jnp.int32) - start, n)
        else:
            act_dim, dist = int(sp.flat_dim(act_spec)), deterministic(act_spec)
            to_unit, _ = action_scaler(act_spec)

            def tokens(actions):
                lead = actions.shape[:actions.ndim - len(act_spec.shape)]
                return to_unit(actions.reshape(-1, act_dim)).reshape(*lead, act_dim)

        C, scale = self.context_size, self.return_scale
        target = float(self.target_return) * scale
        net = DecisionTransformerNet(
            encoder, act_dim, C, self.max_timestep, self.num_heads, self.num_layers,
            self.attn_dropout, self.resid_dropout, self.embed_dropout, self.activation_type,
            self.embed_activation_type, self.position_encoding_type, self.discrete)

        def init(rng):
            dummy = np.zeros((1, obs_dim), np.float32) if isinstance(obs_spec, sp.BoxSpec) \
                else np.zeros((1, *obs_spec.shape), obs_spec.dtype)
            return {"policy": net.init(rng, dummy, np.zeros((1, act_dim), np.float32),
                                       np.zeros(1, np.float32), np.zeros(1, np.int32), 0)}

        def as_sequences(batch, rng):
            """`obs, action tokens, rtg, timesteps, last, keys, mask` `[B, T, ...]`; flat
            rows as one-step sequences."""
            mask = batch["loss_mask"]
            cols = {k: batch[k] for k in ("obs", "actions", "returns_to_go", "timesteps")}
            if mask.ndim == 1:
                cols = {k: v[:, None] for k, v in cols.items()}
                rng, mask = rng[:, None], mask[:, None]
            B, T = mask.shape
            lens = batch["seq_lens"] if "seq_lens" in batch else jnp.full(B, T)
            last = jnp.clip(jnp.asarray(lens, jnp.int32) - 1, 0, T - 1)
            obs = cols["obs"]
            if isinstance(obs_spec, sp.BoxSpec):
                obs = obs.reshape(B, T, obs_dim)
            return (obs, tokens(cols["actions"]), cols["returns_to_go"] * scale,
                    cols["timesteps"], last, rng[:, 0], cols["actions"], mask)

        def loss_fn(params, batch, rng, axis):
            obs, acts, rtg, t, last, keys, actions, mask = as_sequences(batch, rng)
            out = causal_outputs(net, params["policy"], obs, acts.astype(rtg.dtype), rtg, t,
                                 last, keys)
            if self.discrete:
                loss = -dist.logp(out.reshape(-1, act_dim), actions.reshape(-1))
            else:
                loss = jnp.sum((jnp.tanh(out) - acts) ** 2, axis=-1).reshape(-1)
            loss = loss.reshape(batch["loss_mask"].shape)
            return loss, {"policy_loss": loss}

        def initial_state(batch_size=None):
            lead = () if batch_size is None else (batch_size,)
            z = {"obs": (C, obs_dim), "actions": (C, act_dim), "rtg": (C,), "t": (C,),
                 "n": (), "rest": ()}
            return {k: np.zeros((*lead, *s), np.float32) for k, s in z.items()}

        def forward(params, batch):
            """One acting step per row (`obs` `[N, 1, obs_dim]`, the context in
            `state_in`): the context moves on by the step, the output is read at it."""
            s = jax.tree_util.tree_map(jnp.asarray, batch["state_in"])
            N = s["n"].shape[0]
            o = jnp.asarray(batch["obs"]).reshape(N, obs_dim).astype(jnp.float32)
            prev_a, prev_r = o[:, obs_dim - act_dim - 1:obs_dim - 1], o[:, -1]
            if not self.discrete:
                prev_a = tokens(prev_a.reshape(N, *act_spec.shape))
            n = s["n"]
            fresh = n < 0.5
            rest = jnp.where(fresh, target, s["rest"] - prev_r * scale)
            rows = jnp.arange(N)
            filled = jnp.minimum(n, C).astype(jnp.int32)
            prev_slot = jnp.clip(filled - 1, 0, C - 1)
            acts = s["actions"].at[rows, prev_slot].set(
                jnp.where(fresh[:, None], s["actions"][rows, prev_slot], prev_a))
            full = n >= C

            def shift(x):
                return jnp.where(full.reshape(N, *[1] * (x.ndim - 1)), jnp.roll(x, -1, 1), x)

            pos = jnp.where(full, C - 1, filled)
            ctx_obs = shift(s["obs"]).at[rows, pos].set(o)
            ctx_act = shift(acts).at[rows, pos].set(0.0)
            ctx_rtg = shift(s["rtg"]).at[rows, pos].set(rest)
            ctx_t = shift(s["t"]).at[rows, pos].set(n)
            out = causal_outputs(net, params, ctx_obs, ctx_act, ctx_rtg,
                                 ctx_t.astype(jnp.int32), pos)
            new = {"obs": ctx_obs, "actions": ctx_act, "rtg": ctx_rtg, "t": ctx_t,
                   "n": n + 1.0, "rest": rest}
            return out[rows, pos][:, None], new

        def apply(params, obs):
            raise TypeError(f"{name}'s policy acts on a context: call forward(params, batch) "
                            f"with 'obs' [N, 1, ...] and 'state_in'")

        policy = policy_module(init=lambda rng: init(rng)["policy"], apply=apply, dist=dist,
                               obs_spec=obs_spec, act_spec=act_spec, forward=forward,
                               initial_state=initial_state, max_seq_len=C)
        optimizer = self._schedule_optimizer() if self.discrete else self._optimizer()
        learning = LearningSpec(init=init, losses=(
            Loss("default_optimizer", ("policy",), loss_fn, optimizer),))
        acting = ActingSpec(act=lambda params, obs: policy.apply(params["policy"], obs),
                            dist=dist, policy=policy)
        data = DataSpec(columns=("obs", "actions", "returns_to_go", "timesteps"),
                        learner_connector=(pipeline(add_returns_to_go(1.0, bootstrap_obs=False),
                                                    add_timesteps()),), windows=True)
        return AlgorithmSpec(learning, acting, data)

    def _schedule_optimizer(self) -> optax.GradientTransformation:
        return self._optimizer()


@dataclasses.dataclass(frozen=True)
class DecisionTransformerConfig(_DecisionTransformerBase):
    """Decision Transformer for bounded Box actions, with d3rlpy's names and defaults (see
    the module docstring).

    Example:
        >>> from rljax_offline import DecisionTransformerConfig
        >>> algo = (DecisionTransformerConfig().environment("Pendulum-v1")
        ...         .offline_data(input_="data/pendulum_mixed")
        ...         .training(context_size=10, num_updates_per_iteration=5,
        ...                   target_return=-150.0)).build()
        >>> result = algo.train()
    """

    algo_name = "decision_transformer"


@dataclasses.dataclass(frozen=True)
class DiscreteDecisionTransformerConfig(_DecisionTransformerBase):
    """Decision Transformer for Discrete actions, with d3rlpy's names and defaults (see the
    module docstring).

    Example:
        >>> from rljax_offline import DiscreteDecisionTransformerConfig
        >>> algo = (DiscreteDecisionTransformerConfig().environment("CartPole-v1")
        ...         .offline_data(input_="data/cartpole")
        ...         .training(num_layers=2, num_heads=2, num_updates_per_iteration=5,
        ...                   target_return=500.0)).build()
        >>> result = algo.train()
    """

    algo_name = "discrete_decision_transformer"
    discrete = True

    lr: float = option(6e-4, "training", positive_float, "learning rate (d3rlpy's "
                       "learning_rate)")
    train_batch_size_per_learner: int = option(2560, "training", positive_int,
                                               "timesteps of one update (sequences of "
                                               "context_size), over all devices")
    num_heads: int = option(8, "training", positive_int, "attention heads")
    num_layers: int = option(6, "training", positive_int, "transformer blocks")
    activation_type: str = option("gelu", "training", one_of(*ACTIVATIONS),
                                  "the feed-forward layers' activation")
    embed_activation_type: str = option("tanh", "training", one_of(*ACTIVATIONS),
                                        "activation on each token's embedding")
    position_encoding_type: str = option("global", "training", one_of("simple", "global"),
                                         "timestep embedding per token, or the last one's "
                                         "plus a per-position one")
    warmup_tokens: int = option(10240, "training", non_negative_int,
                                "tokens (timesteps) of the rate's linear warm-up")
    final_tokens: int = option(30000000, "training", positive_int,
                               "tokens at which the cosine decay ends (floor 0.1)")

    def _schedule_optimizer(self) -> optax.GradientTransformation:
        adam = optax.adam(_lr_schedule(self.lr, self.train_batch_size_per_learner,
                                       self.warmup_tokens, self.final_tokens))
        return optax.chain(optax.clip_by_global_norm(self.grad_clip), adam) \
            if self.grad_clip else adam
