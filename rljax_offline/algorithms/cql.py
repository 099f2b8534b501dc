"""CQL: conservative Q-learning (Kumar et al. 2020), with RLlib's parameter names and defaults
(three exceptions below: `bc_iters`, and Discrete's `min_q_weight` and `critic_lr`).

Box actions: RLlib's SAC-based CQL. Twin Q networks and their Polyak targets, a tanh-squashed
Gaussian actor, automatic entropy tuning, and the CQL(H) regulariser: per state,
`temperature * logsumexp(Q / temperature)` over `num_actions` uniform random actions and
`num_actions` actions of the current policy at `s` and at `s'` (each importance-weighted by
its density), minus `Q` of the data's action, times `min_q_weight`. It pushes Q down on actions
the data does not hold and up on the data's. With `lagrangian=True` the weight is a learned
multiplier `alpha_prime` that holds the gap at `lagrangian_thresh`. For the first `bc_iters`
updates the actor does behavior cloning (`alpha * logp(pi) - logp(data action)`), then SAC's
`alpha * logp(pi) - min Q(s, pi(s))`. `deterministic_backup=True` leaves the entropy term out
of the TD target (RLlib's default). The TD target, actor and temperature losses are SAC's
(`learning.losses`, shared with `algorithms.sac`). Two options give d3rlpy's CQL where it
differs: `mean_action_backup=True` bootstraps from `Q'(s', mean action of pi(s'))` rather than
a draw, and `alpha_prime_lr` steps the multiplier at its own rate (RLlib's: `critic_lr`).

`bc_iters` defaults to 0 (d3rlpy's CQL has no BC phase), not RLlib's 20,000: on a CPU RLlib's
warm-up is long, and for all of it the actor copies the data, whose majority on mixed-quality
sets is poor (the measurements behind this choice: the benchmarks page, "Figures behind design
choices"). RLlib's behaviour is `.training(bc_iters=20000)`.

Box actions outside the space's bounds (RLlib records a Gaussian policy's unclipped samples)
are clipped just inside the bounds by the learner pipeline (`clip_actions_inside_bounds`): the
tanh-squashed actor's log-probability is -inf outside them, and the env ran the clipped action,
so the Q networks learn the value of what was executed.

Discrete actions: Q-learning-based CQL as d3rlpy's DiscreteCQL: a Huber TD loss to a double-DQN
target (the online network picks the next action, the target network values it) plus
`min_q_weight * (temperature * logsumexp(Q(s, .) / temperature) - Q(s, a))`, with hard target
copies; the policy is greedy in Q (`act` returns the Q values as logits). RLlib has no
discrete CQL, so its Box defaults are no guide there: `min_q_weight` and `critic_lr` left at
None resolve per action space, RLlib's 5.0 and 1e-3 for Box, 1.0 (d3rlpy's DiscreteCQL `alpha`
and the paper's discrete setting) and 3e-4 for Discrete. On the mixed CartPole set
(`cartpole-mixed`, batch 32, 20,000 updates, 10 evaluations) the Box values reach the expert
(500) within 4,000 updates and then collapse to policies that fail at once (returns 9-10 in
half the later evaluations; levels 107, 157, 124 over seeds 0-2); with weight 1.0 and lr 3e-4
no evaluation after the first tenth falls below 260 (levels 476, 463 for seeds 1-2).

Optimizer groups (RLlib's names): `qf` (critic, with `alpha_prime` when Lagrangian), `policy`,
`alpha`; Discrete has `qf` alone.

Recurrent (`use_lstm` / `use_gru`): the actor is recurrent and so are the Q networks (same
model config, each its own encoder and cell; the action enters Q's head, so Q of the sampled
actions costs no extra unroll). The actor unrolls from the batch's `state_in`, the Q networks
and their targets from their initial state at each sequence; the TD target's `s'` is the next
step of the same unroll (`recurrent.step_outputs`), the last step's being the recorded next
observation. (The batch's `next_state_in`, RLlib's, is not read: it would start `s'` from
the recorded behaviour state rather than this unroll's; see the README.) Discrete CQL acts
greedily in Q, so there the Q ensemble is the recurrent policy:
it unrolls from `state_in` (`[B, k, cell]`), target included.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.algorithms.config import AlgorithmConfig, ConfigError
from rljax_offline.algorithms.fine_tuning_options import FineTuningOptions
from rljax_offline.algorithms.options import (
    any_float,
    boolean,
    non_negative_float,
    non_negative_int,
    option,
    optional,
    positive_float,
    positive_int,
    unit_interval_open_left,
)
from rljax_offline.connectors.learner import clip_actions_inside_bounds
from rljax_offline.learning.losses import (
    huber,
    not_terminal,
    per_example_uniform,
    soft_actor_loss,
    soft_td_target,
    take_action,
    target_entropy,
    temperature_loss,
)
from rljax_offline.learning.optim import make_optimizer
from rljax_offline.learning.spec import (
    ActingSpec,
    AlgorithmSpec,
    DataSpec,
    LearningSpec,
    Loss,
)
from rljax_offline.models.actor_and_q import actor, check_bounded, q_ensemble
from rljax_offline.models.distributions import action_scaler, categorical
from rljax_offline.models.module import Module, policy_module
from rljax_offline.models.policy import check_model_config, is_recurrent, recurrent_cell
from rljax_offline.models.recurrent import step_rows

ALPHA_PRIME_MAX = 1e6
CQL_COLUMNS = ("obs", "actions", "rewards", "new_obs", "terminateds")
DISCRETE_TARGET_UPDATE_FREQ = 1000
# (min_q_weight, critic_lr) when left at None: RLlib's for Box; for Discrete (RLlib has none)
# d3rlpy's DiscreteCQL weight and a rate that does not collapse (module docstring).
BOX_DEFAULTS, DISCRETE_DEFAULTS = (5.0, 1e-3), (1.0, 3e-4)


def split_keys(keys: jax.Array, num: int) -> jax.Array:
    """Per-example keys `[N, 2]` -> `[N, num, 2]`, independent streams per example."""
    return jax.vmap(lambda k: jax.random.split(k, num))(keys)


def sample_per_example(dist, inputs: jax.Array, keys: jax.Array):
    """Reparameterised `(actions, logp)`, one draw per row of `inputs [N, d]` with its own
    key (so a draw does not depend on how the batch is sharded over devices)."""
    one = jax.vmap(lambda x, k: jax.tree_util.tree_map(
        lambda y: y[0], dist.sample_and_logp(x[None], k)))
    return one(inputs, keys)


def repeat_rows(x: jax.Array, m: int) -> jax.Array:
    """`[N, ...]` -> `[N * m, ...]`, each row m times in a row."""
    return jnp.repeat(x, m, axis=0)


def auto_or_number(v) -> str | None:
    """'auto', a finite number, or a number as text (what the CLI passes)."""
    if v == "auto":
        return None
    try:
        return any_float(float(v)) if not isinstance(v, bool) else "'auto' or a finite number"
    except (TypeError, ValueError):
        return "'auto' or a finite number"


@dataclasses.dataclass(frozen=True)
class CQLConfig(FineTuningOptions, AlgorithmConfig):
    """CQL with RLlib's names and defaults (RLlib's `CQLConfig` over its `SACConfig`).

    Example:
        >>> from rljax_offline import CQLConfig
        >>> algo = (CQLConfig().environment("Pendulum-v1")
        ...         .offline_data(input_="data/pendulum_mixed")
        ...         .training(bc_iters=2000, min_q_weight=5.0)).build()
        >>> result = algo.train()
    """

    algo_name = "cql"

    lr: float | None = option(None, "training", optional(positive_float),
                              "unused (RLlib sets it None): CQL has actor_lr, critic_lr, alpha_lr")
    train_batch_size_per_learner: int = option(256, "training", positive_int,
                                               "rows of one update, over all devices")
    actor_lr: float = option(1e-4, "training", positive_float, "learning rate of the actor")
    critic_lr: float | None = option(
        None, "training", optional(positive_float),
        "learning rate of the Q networks (and of alpha_prime); None: 1e-3 for Box actions "
        "(RLlib's), 3e-4 for Discrete")
    alpha_lr: float = option(1e-3, "training", positive_float,
                             "learning rate of the entropy coefficient")
    bc_iters: int = option(0, "training", non_negative_int,
                           "updates of behavior cloning for the actor before SAC's actor loss "
                           "(RLlib's default: 20000)")
    temperature: float = option(1.0, "training", positive_float,
                                "temperature of the CQL logsumexp")
    num_actions: int = option(10, "training", positive_int,
                              "random and policy actions sampled per state for the CQL term")
    lagrangian: bool = option(False, "training", boolean,
                              "learn the CQL weight (alpha_prime) to hold lagrangian_thresh")
    lagrangian_thresh: float = option(5.0, "training", any_float,
                                      "target of the CQL gap with lagrangian=True")
    min_q_weight: float | None = option(
        None, "training", optional(non_negative_float),
        "weight of the CQL regulariser; None: 5.0 for Box actions (RLlib's), 1.0 for Discrete "
        "(d3rlpy's DiscreteCQL)")
    deterministic_backup: bool = option(True, "training", boolean,
                                        "leave the entropy term out of the TD target")
    mean_action_backup: bool = option(
        False, "training", boolean,
        "TD target at the policy's mean action at s' rather than a draw (d3rlpy's CQL and "
        "Cal-QL); needs deterministic_backup")
    alpha_prime_lr: float | None = option(
        None, "training", optional(positive_float),
        "learning rate of the Lagrangian weight alpha_prime; None: critic_lr (RLlib's)")
    twin_q: bool = option(True, "training", boolean, "two Q networks, their minimum in targets")
    initial_alpha: float = option(1.0, "training", positive_float,
                                  "initial entropy coefficient")
    target_entropy: float | str = option("auto", "training", auto_or_number,
                                         "entropy target; 'auto' is -dim(actions)")
    tau: float = option(5e-3, "training", unit_interval_open_left,
                        "Polyak weight of the target update (Box; Discrete copies)")
    target_network_update_freq: int = option(
        0, "training", non_negative_int,
        "updates between target updates; 0: every update (Box, Polyak with tau) or every "
        f"{DISCRETE_TARGET_UPDATE_FREQ} (Discrete, hard copies)")

    def validate(self) -> None:
        super().validate()
        if self.lr is not None:
            raise ConfigError("CQLConfig: lr is not used; set actor_lr, critic_lr and alpha_lr "
                              f"(got lr={self.lr!r})")
        if self.mean_action_backup and not self.deterministic_backup:
            raise ConfigError("mean_action_backup=True needs deterministic_backup=True: the "
                              "mean action has no log-density for the entropy term")
        if self.alpha_prime_lr is not None and not self.lagrangian:
            raise ConfigError("alpha_prime_lr is the Lagrangian weight's: set lagrangian=True "
                              "or drop it")

    def check_spaces(self, obs_spec, act_spec) -> None:
        super().check_spaces(obs_spec, act_spec)
        if isinstance(act_spec, sp.BoxSpec):
            check_bounded(act_spec, "CQLConfig (SAC-based CQL for Box actions)")
        elif self.mean_action_backup:
            raise ConfigError("mean_action_backup is for Box actions (Discrete CQL's target "
                              "is Double DQN's): drop it")

    def policy_value_floor(self, batch: dict) -> jax.Array | None:
        """A lower bound `[N]` on the Q values of the policy's actions inside the CQL term
        (None: none, CQL's); Cal-QL's is the data's Monte-Carlo return to go."""
        return None

    def resolved(self, discrete: bool) -> tuple[float, float]:
        """`(min_q_weight, critic_lr)`, each None resolved for the action space (module
        docstring: RLlib's Box values, d3rlpy's discrete weight)."""
        box_or_discrete = {False: BOX_DEFAULTS, True: DISCRETE_DEFAULTS}[discrete]
        return (box_or_discrete[0] if self.min_q_weight is None else self.min_q_weight,
                box_or_discrete[1] if self.critic_lr is None else self.critic_lr)

    def make_spec(self, obs_spec, act_spec) -> AlgorithmSpec:
        self.check_spaces(obs_spec, act_spec)
        if isinstance(act_spec, sp.DiscreteSpec):
            return _discrete_spec(self, obs_spec, act_spec)
        return _continuous_spec(self, obs_spec, act_spec)


def conservative_total(td: jax.Array, cql: jax.Array, params: dict, cfg: CQLConfig,
                       metrics: dict) -> jax.Array:
    """The critic's per-example loss: TD plus the CQL term `cql [k, N]` (already weighted),
    or with `lagrangian` that term as a constraint held at `lagrangian_thresh` by the learned
    multiplier `alpha_prime` (Q minimises `alpha_prime * (cql - thresh)`, alpha_prime
    maximises it; each sees the other as a constant, in one objective)."""
    metrics.update(qf_loss=td, cql_loss=jnp.sum(cql, axis=0))
    if not cfg.lagrangian:
        total = td + jnp.sum(cql, axis=0)
    else:
        alpha_prime = jnp.clip(jnp.exp(params["log_alpha_prime"]), 0.0, ALPHA_PRIME_MAX)
        held = jax.lax.stop_gradient(alpha_prime) * (cql - cfg.lagrangian_thresh)
        dual = -0.5 * alpha_prime * (jax.lax.stop_gradient(cql) - cfg.lagrangian_thresh)
        total = td + jnp.sum(held, axis=0) + jnp.sum(dual, axis=0)
        metrics.update(alpha_prime=alpha_prime, alpha_prime_loss=jnp.sum(dual, axis=0))
    metrics["critic_loss"] = total
    return total


def critic_optimizer(cfg: CQLConfig, critic_lr: float):
    """Adam for the Q networks and, with `lagrangian`, alpha_prime: at `alpha_prime_lr` when
    set (its own Adam state), else at `critic_lr` with the networks (RLlib's)."""
    lr_of = None if cfg.alpha_prime_lr is None else {"log_alpha_prime": cfg.alpha_prime_lr}
    return make_optimizer(critic_lr, cfg.grad_clip, lr_of=lr_of)


def _critic_params(cfg: CQLConfig, params: dict) -> dict:
    if cfg.lagrangian:
        params["log_alpha_prime"] = jnp.zeros((), jnp.float32)
    return params


def _continuous_spec(cfg: CQLConfig, obs_spec, act_spec) -> AlgorithmSpec:
    policy = actor(obs_spec, act_spec, cfg.model_config)
    dist = policy.dist
    q = q_ensemble(obs_spec, act_spec, cfg.model_config, cfg.twin_q)
    _, from_unit = action_scaler(act_spec)
    dim = int(math.prod(act_spec.shape) or 1)
    m, temp, gamma = cfg.num_actions, cfg.temperature, cfg.gamma
    # Uniform random actions have density 0.5**dim in the unit box, where logp lives.
    log_uniform = dim * math.log(0.5)
    entropy_target = target_entropy(cfg.target_entropy, act_spec)
    bc_iters, deterministic = cfg.bc_iters, cfg.deterministic_backup
    weight, critic_lr = cfg.resolved(discrete=False)

    def init(rng):
        k1, k2 = jax.random.split(rng)
        return _critic_params(cfg, {
            "policy": policy.init(k1), "q": q.init(k2),
            "log_alpha": jnp.asarray(math.log(cfg.initial_alpha), jnp.float32)})

    def prepare(params, extra, batch, rng, axis):
        in_bc = (extra["num_actor_updates"] < bc_iters).astype(jnp.float32)
        return {**batch, "bc_phase": in_bc}, {**extra,
                                              "num_actor_updates": extra["num_actor_updates"] + 1}

    def q_of_many(q_params, feats, actions, n):
        """Q of `n` actions per state from features `[k, N, F]`: actions `[N * n, ...]` ->
        `[k, N, n]`."""
        values = q.head(q_params, jnp.repeat(feats, n, axis=1), actions)
        return values.reshape(values.shape[0], -1, n)

    def critic_loss(params, batch, rng, axis):
        keys = split_keys(rng.reshape(-1, 2), 3 * m + 1)
        alpha = jnp.exp(params["log_alpha"])
        # TD target from the target networks and a fresh policy action at s' (or its mean).
        inputs, next_inputs = policy.steps(params["policy"], batch, with_next=True)
        n = inputs.shape[0]
        if cfg.mean_action_backup:
            next_a, next_logp = dist.greedy(next_inputs), jnp.zeros((n,), jnp.float32)
        else:
            next_a, next_logp = sample_per_example(dist, next_inputs, keys[:, 0])
        _, target_next = q.steps(params["target_q"], batch, with_next=True)
        next_q = jnp.min(q.head(params["target_q"], target_next, next_a), axis=0)
        if deterministic:  # the entropy term left out of SAC's soft target
            next_logp = jnp.zeros_like(next_logp)
        y = soft_td_target(batch, next_q, next_logp, alpha, gamma)
        feats, _ = q.steps(params["q"], batch)
        q_data = q.head(params["q"], feats, step_rows(batch, "actions"))  # [k, N]
        td = jnp.sum((q_data - y) ** 2, axis=0)
        # CQL(H): logsumexp over random actions and policy actions at s and s'.
        rand_u = per_example_uniform(keys[:, 1:1 + m].reshape(-1, 2), (dim,), -1.0, 1.0)
        rand_a = from_unit(rand_u).reshape(n * m, *act_spec.shape)
        pi_a, pi_logp = sample_per_example(
            dist, repeat_rows(inputs, m), keys[:, 1 + m:1 + 2 * m].reshape(-1, 2))
        nx_a, nx_logp = sample_per_example(
            dist, repeat_rows(next_inputs, m), keys[:, 1 + 2 * m:].reshape(-1, 2))
        floor = cfg.policy_value_floor(batch)

        def bounded(values):  # [k, N, m]; Cal-QL: max(Q, return to go)
            return values if floor is None else jnp.maximum(values, floor[None, :, None])

        cat = jnp.concatenate([
            q_of_many(params["q"], feats, rand_a, m) - log_uniform,
            bounded(q_of_many(params["q"], feats, pi_a, m)) - pi_logp.reshape(n, m),
            bounded(q_of_many(params["q"], feats, nx_a, m)) - nx_logp.reshape(n, m)], axis=-1)
        gap = temp * jax.nn.logsumexp(cat / temp, axis=-1) - q_data  # [k, N]
        metrics = {"qf_mean": q_data.mean(0), "td_target_mean": y}
        total = conservative_total(td, weight * gap, params, cfg, metrics)
        return total, metrics

    def actor_loss(params, batch, rng, axis):
        inputs, _ = policy.steps(params["policy"], batch)
        a, logp = sample_per_example(dist, inputs, rng.reshape(-1, 2))
        alpha = jax.lax.stop_gradient(jnp.exp(params["log_alpha"]))
        q_pi = jnp.min(q.head(params["q"], q.steps(params["q"], batch)[0], a), axis=0)
        sac = soft_actor_loss(alpha, logp, q_pi)
        bc = alpha * logp - dist.logp(inputs, step_rows(batch, "actions"))
        loss = batch["bc_phase"] * bc + (1.0 - batch["bc_phase"]) * sac
        return loss, {"policy_loss": loss, "logp": logp, "bc_phase": batch["bc_phase"]}

    def alpha_loss(params, batch, rng, axis):
        inputs, _ = policy.steps(params["policy"], batch)
        _, logp = sample_per_example(dist, inputs, rng.reshape(-1, 2))
        loss = temperature_loss(params["log_alpha"], logp, entropy_target)
        return loss, {"alpha_loss": loss, "alpha_value": jnp.exp(params["log_alpha"])}

    critic_nets = ("q", "log_alpha_prime") if cfg.lagrangian else ("q",)
    learning = LearningSpec(
        init=init,
        losses=(Loss("qf", critic_nets, critic_loss, critic_optimizer(cfg, critic_lr)),
                Loss("policy", ("policy",), actor_loss, make_optimizer(cfg.actor_lr,
                                                                         cfg.grad_clip)),
                Loss("alpha", ("log_alpha",), alpha_loss, make_optimizer(cfg.alpha_lr))),
        targets={"target_q": "q"}, tau=cfg.tau,
        target_update_period=max(1, cfg.target_network_update_freq),
        prepare=prepare, extra_init={"num_actor_updates": np.int32(0)})
    acting = ActingSpec(act=lambda params, obs: policy.apply(params["policy"], obs), dist=dist,
                        policy=policy)
    return AlgorithmSpec(learning, acting, DataSpec(
        columns=CQL_COLUMNS, learner_connector=(clip_actions_inside_bounds(),)))


def _discrete_spec(cfg: CQLConfig, obs_spec, act_spec) -> AlgorithmSpec:
    q = q_ensemble(obs_spec, act_spec, cfg.model_config, cfg.twin_q)
    temp, gamma = cfg.temperature, cfg.gamma
    weight, critic_lr = cfg.resolved(discrete=True)

    def init(rng):
        return _critic_params(cfg, {"q": q.init(rng)})

    def loss(params, batch, rng, axis):
        state_in = batch.get("state_in")  # recurrent: the Q ensemble is the acting policy
        feats, next_feats = q.steps(params["q"], batch, with_next=True, state_in=state_in)
        q_all = q.head(params["q"], feats)  # [k, N, n]
        q_data = take_action(q_all, step_rows(batch, "actions"))  # [k, N]
        # Double DQN: the online networks choose the next action, the targets value it.
        next_a = jnp.argmax(jnp.mean(q.head(params["q"], next_feats), axis=0), axis=-1)
        _, target_next = q.steps(params["target_q"], batch, with_next=True, state_in=state_in)
        next_q = jnp.min(take_action(q.head(params["target_q"], target_next), next_a), axis=0)
        y = jax.lax.stop_gradient(step_rows(batch, "rewards")
                                  + gamma * not_terminal(batch) * next_q)
        td = jnp.sum(huber(q_data - y), axis=0)
        gap = temp * jax.nn.logsumexp(q_all / temp, axis=-1) - q_data
        metrics = {"qf_mean": q_data.mean(0), "td_target_mean": y}
        total = conservative_total(td, weight * gap, params, cfg, metrics)
        return total, metrics

    period = cfg.target_network_update_freq or DISCRETE_TARGET_UPDATE_FREQ
    nets = ("q", "log_alpha_prime") if cfg.lagrangian else ("q",)
    mc = check_model_config(dict(cfg.model_config))
    greedy = _q_greedy_policy(q, obs_spec, act_spec, recurrent_cell(mc)[2]) if is_recurrent(
        mc) else None
    learning = LearningSpec(
        init=init, losses=(Loss("qf", nets, loss, critic_optimizer(cfg, critic_lr)),),
        targets={"target_q": "q"}, tau=1.0, target_update_period=period)
    acting = ActingSpec(act=lambda params, obs: jnp.mean(q.apply(params["q"], obs), axis=0),
                        dist=categorical(act_spec.n), policy=greedy, policy_network="q")
    return AlgorithmSpec(learning, acting, DataSpec(columns=CQL_COLUMNS))


def _q_greedy_policy(q: Module, obs_spec, act_spec, max_seq_len: int) -> Module:
    """A recurrent Q ensemble as the policy that acts (greedy in the mean Q over the
    ensemble, the Q values as categorical logits), on `params["q"]`."""

    def forward(params, seq):
        feats, state = q.forward(params, seq)  # [k, B, T, F], state [B, k, ...]
        k, B, T = feats.shape[:3]
        values = jnp.mean(q.head(params, feats.reshape(k, B * T, -1)), axis=0)
        return values.reshape(B, T, -1), state

    def apply(params, obs):
        raise TypeError("a recurrent Q policy needs a state: call forward(params, batch)")

    return policy_module(q.init, apply, categorical(act_spec.n), obs_spec=obs_spec,
                         act_spec=act_spec, forward=forward, initial_state=q.initial_state,
                         max_seq_len=max_seq_len)
