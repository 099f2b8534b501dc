"""MATD3+BC: TD3+BC with a centralised critic, the offline multi-agent baseline of OG-MARL
(Formanek et al. 2023) and of Pan et al.'s OMAR paper (2022).

Trained through `config.multi_agent()` on multi-agent data whose agents act at every env
step. The algorithm trains ONE team module on joint rows, one row per env step holding
every agent's step (`connectors.joint_rows`: `obs` `[N, A, d]`, `actions` `[N, A, k]`,
`team_rewards`, `global_state`, ...), as one `LearningSpec`, so the multi-module runtime
(`learning.multi_data_parallel`) steps it as it steps any module:

* decentralised actors: one deterministic TD3+BC actor (`tanh` scaled to the bounds) shared
  by the agents, applied to each agent's own observation (under `vmap` over the agent axis);
  acting needs nothing but the agent's observation, so the evaluation runs it per agent;
* a centralised critic: twin Q networks on `(global state, joint action)` regress
  `team_reward + gamma * (1 - terminated) * min_k Q_target_k(s', a')`, where `a'` is each
  agent's target action at its next observation plus its own clipped Gaussian noise (target
  policy smoothing per agent);
* the actor, every `update_actor_interval`-th update: `-lambda * Q_1(s, pi(o_1), ...,
  pi(o_A)) + mean_{agents, dims} (pi(o_i) - a_i)^2`, every agent's action replaced by its
  actor's (OG-MARL's joint form), `lambda = alpha / mean|Q_1|` over the global batch (TD3+BC's
  normalisation, held constant in the gradient); targets follow with Polyak `tau`.

The global state is the env's `state()` as `MultiAgentEnvRunner` records it (PettingZoo's
`state()`; the multi-agent Parquet format keeps it per env step), or, with
`use_global_state=False` or an env without `state()`, the agents' (normalized) observations
concatenated. Observations are normalized per agent with statistics over every agent's
observations (one `mean_std_filter`, as TD3+BC's, shared with acting); the env's state by the
mean and std of the data's states (fixed once the data is read, part of the critic's input
only). Every option is TD3+BC's (d3rlpy's names and defaults) plus `use_global_state` and
`actor_q_actions` ("own": the actor's Q term replaces one agent's action at a time, the
others' from the data, MADDPG's form, averaged over the agents).

Without `multi_agent()` it is TD3+BC: with one agent the global state is its observation.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp

from rljax_offline import spaces as sp
from rljax_offline.algorithms.options import boolean, one_of, option
from rljax_offline.algorithms.td3_bc import TD3BCConfig, td3_parts, td3_spec
from rljax_offline.connectors.joint_rows import JOINT_COLUMNS
from rljax_offline.learning.losses import per_example_normal
from rljax_offline.learning.spec import AlgorithmSpec, DataSpec
from rljax_offline.models.actor_and_q import q_ensemble
from rljax_offline.models.distributions import action_scaler

__all__ = ["MATD3BCConfig", "joint_action_spec"]


def joint_action_spec(act_spec: sp.BoxSpec, num_agents: int) -> sp.BoxSpec:
    """The joint action's spec: `num_agents` flat copies of a Box side by side.

    Args:
      act_spec: one agent's Box action spec.
      num_agents: the agents of the joint action.
    """
    return sp.BoxSpec(shape=(num_agents * sp.flat_dim(act_spec),), dtype=act_spec.dtype,
                      low=tuple(act_spec.low) * num_agents,
                      high=tuple(act_spec.high) * num_agents)


@dataclasses.dataclass(frozen=True)
class MATD3BCConfig(TD3BCConfig):
    """MATD3+BC (see the module docstring): TD3+BC's options, trained on joint rows.

    Example:
        >>> from rljax_offline import MATD3BCConfig
        >>> config = (MATD3BCConfig()
        ...           .environment("mpe2.simple_spread_v3:parallel_env",
        ...                        env_config={"continuous_actions": True})
        ...           .offline_data(input_="data/spread")
        ...           .multi_agent())
        >>> config.trains_team_module, config.alpha
        (True, 2.5)
    """

    algo_name = "matd3_bc"
    # `MultiAgentAlgorithm` builds one team module on joint rows (one per env step) for it,
    # not one module per policy on agent steps.
    trains_team_module: ClassVar[bool] = True

    use_global_state: bool = option(
        True, "training", boolean,
        "the critic reads the env's state() kept in the data; False (or an env without "
        "state()): the agents' observations concatenated")

    actor_q_actions: str = option(
        "joint", "training", one_of("joint", "own"),
        "the actor's Q term: 'joint' replaces every agent's action by its actor's; 'own' "
        "replaces one agent's at a time, the others from the data (MADDPG's form), averaged")

    def make_team_spec(self, obs_spec, act_spec, num_agents: int,
                       state_spec: sp.BoxSpec) -> AlgorithmSpec:
        """The team module's spec on joint rows (`connectors.joint_rows.JOINT_COLUMNS`).

        Args:
          obs_spec: one agent's observation spec (after the learner pipeline's pieces).
          act_spec: one agent's Box action spec.
          num_agents: the agents of a joint row.
          state_spec: the critic's global state spec.
        """
        q = q_ensemble(state_spec, joint_action_spec(act_spec, num_agents), self.model_config,
                       self.twin_q)
        parts = td3_parts(self, obs_spec, act_spec, q)
        dim = sp.flat_dim(act_spec)
        gamma, alpha = self.gamma, self.alpha
        sigma, noise_clip = self.target_smoothing_sigma, self.target_smoothing_clip
        per_agent_unit = jax.vmap(parts.unit_action, in_axes=(None, 1), out_axes=1)
        to_unit = jax.vmap(parts.to_unit, in_axes=1, out_axes=1)
        _, from_unit = action_scaler(act_spec)  # broadcasts over the agent axis

        def joint(unit):  # [N, A, dim] in the unit box -> [N, A * dim] env actions
            return from_unit(unit).reshape(unit.shape[0], -1)

        def critic_loss(params, batch, rng, axis):
            noise = jnp.clip(sigma * per_example_normal(rng, (num_agents, dim)),
                             -noise_clip, noise_clip)
            next_unit = jnp.clip(per_agent_unit(params["target_policy"], batch["new_obs"])
                                 + noise, -1.0, 1.0)
            next_q = jnp.min(q.apply(params["target_q"], batch["new_global_state"],
                                     joint(next_unit)), axis=0)
            done = jnp.all(batch["terminateds"], axis=-1).astype(jnp.float32)
            y = jax.lax.stop_gradient(batch["team_rewards"] + gamma * (1.0 - done) * next_q)
            actions = batch["actions"].reshape(batch["actions"].shape[0], -1)
            qs = q.apply(params["q"], batch["global_state"], actions)  # [k, N]
            loss = jnp.sum((qs - y) ** 2, axis=0)
            return loss, {"qf_loss": loss, "qf_mean": qs.mean(0), "td_target_mean": y}

        data_unit = to_unit  # the data's actions in the unit box, [N, A, dim]
        own = jnp.eye(num_agents, dtype=bool)[:, None, :, None]  # [A, 1, A, 1]

        def actor_q(q_params, state, unit, actions):
            if self.actor_q_actions == "joint":  # every agent's action its actor's
                return q.apply(q_params, state, joint(unit))[0]
            # each agent's own action its actor's, the others' the data's; mean over agents
            mixed = jnp.where(own, unit[None], data_unit(actions)[None])  # [A, N, A, dim]
            return jax.vmap(lambda u: q.apply(q_params, state, joint(u))[0])(mixed).mean(0)

        def actor_loss(params, batch, rng, axis):
            unit = per_agent_unit(params["policy"], batch["obs"])  # [N, A, dim]
            q1 = actor_q(params["q"], batch["global_state"], unit, batch["actions"])
            lam = alpha / jax.lax.stop_gradient(
                jnp.maximum(axis.mean(jnp.abs(q1), batch["loss_mask"]), 1e-6))
            bc = jnp.mean((unit - to_unit(batch["actions"])) ** 2, axis=(1, 2))
            loss = -lam * q1 + bc
            return loss, {"policy_loss": loss, "bc_loss": bc, "q_lambda": lam}

        return td3_spec(self, parts, critic_loss, actor_loss, DataSpec(columns=JOINT_COLUMNS))

