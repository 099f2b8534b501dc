"""MATD3+BC: TD3+BC with a centralised critic, the offline multi-agent baseline of OG-MARL
(Formanek et al. 2023) and of Pan et al.'s OMAR paper (2022).

Trained through `config.multi_agent()` on multi-agent data whose agents act at every env
step. The algorithm trains ONE team on joint rows, one row per env step holding every
agent's step (`connectors.joint_rows`: `obs` `[N, A, d]`, `actions` `[N, A, k]`,
`team_rewards`, `global_state`, ...), as one `LearningSpec`, so the multi-module runtime
(`learning.multi_data_parallel`) steps it as it steps any module:

* decentralised actors: one deterministic TD3+BC actor (`tanh` scaled to the bounds) per
  module (`params["policy"][module_id]`), applied to the own observation of each agent mapped
  to it (under `vmap` over its agents); acting needs nothing but the agent's observation, so
  the evaluation runs each module's actor per agent. Agents of different spaces (a speaker
  and a listener) map to modules of their own; their rows are zero-padded to the widest
  agent's width and each actor reads its agents' own widths back out (static slices);
* a centralised critic: twin Q networks on `(global state, joint action)` regress
  `team_reward + gamma * (1 - terminated) * min_k Q_target_k(s', a')` (the joint action
  is every agent's own action, unpadded, side by side in agent order), where `a'` is each
  agent's target action at its next observation plus its own clipped Gaussian noise (target
  policy smoothing per agent);
* the actor, every `update_actor_interval`-th update: `-lambda * Q_1(s, pi(o_1), ...,
  pi(o_A)) + mean_{agents} mean_{dims} (pi(o_i) - a_i)^2`, every agent's action replaced by
  its actor's (OG-MARL's joint form), `lambda = alpha / (A * mean|Q_1|)` over the global
  batch (TD3+BC's normalisation, held constant in the gradient): the `1/A` matches the BC
  term's mean over the agents, so each agent's action sees TD3+BC's balance of Q against BC
  (without it the Q term weighs A times alpha per agent); targets follow with Polyak `tau`.

The global state is the env's `state()` as `MultiAgentEnvRunner` records it (PettingZoo's
`state()`; the multi-agent Parquet format keeps it per env step), or, with
`use_global_state=False` or an env without `state()`, the agents' (normalized) observations
concatenated. Observations are normalized per module with statistics over its agents'
observations (one `mean_std_filter` per module, as TD3+BC's, shared with acting); the
env's state by the
mean and std of the data's states (fixed once the data is read, part of the critic's input
only). Every option is TD3+BC's (d3rlpy's names and defaults) plus `use_global_state` and
`actor_q_actions` ("own": the actor's Q term replaces one agent's action at a time, the
others' from the data, MADDPG's form, averaged over the agents).

Without `multi_agent()` it is TD3+BC: with one agent the global state is its observation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.algorithms.options import boolean, one_of, option
from rljax_offline.algorithms.td3_bc import TD3BCConfig, td3_parts, td3_spec
from rljax_offline.connectors.joint_rows import JOINT_COLUMNS, agent_block
from rljax_offline.learning.losses import per_example_normal
from rljax_offline.learning.spec import AlgorithmSpec, DataSpec
from rljax_offline.models.actor_and_q import q_ensemble
from rljax_offline.models.distributions import action_scaler

__all__ = ["MATD3BCConfig", "joint_action_spec"]


def joint_action_spec(act_specs: Sequence[sp.BoxSpec]) -> sp.BoxSpec:
    """The joint action's spec: each agent's flat Box side by side, in agent order.

    Args:
      act_specs: each agent's Box action spec, in the rows' agent order.
    """
    return sp.BoxSpec(shape=(sum(sp.flat_dim(s) for s in act_specs),),
                      dtype=act_specs[0].dtype, low=sum((tuple(s.low) for s in act_specs), ()),
                      high=sum((tuple(s.high) for s in act_specs), ()))


def _rows_of(x, agents: tuple, width: int):
    """Agents `agents`' own `width` features of padded joint rows `[N, A, d_max]`:
    `[N, len(agents), width]` (the rows themselves when that is all of them)."""
    if agents != tuple(range(x.shape[1])):
        x = x[:, list(agents)]
    return x[..., :width] if x.ndim == 3 and width < x.shape[2] else x


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

    def make_team_spec(self, actors: Mapping, num_agents: int,
                       state_spec: sp.BoxSpec) -> AlgorithmSpec:
        """The team's spec on joint rows (`connectors.joint_rows.JOINT_COLUMNS`): one actor
        per module, the twin critics on `(global state, joint action)`.

        Args:
          actors: `{module_id: TeamActor}` (`algorithms.multi_agent_modules`): the module's
            config (its networks), its agents' observation and Box action specs (after the
            learner pipeline's pieces) and their indices on the rows' agent axis.
          num_agents: the agents of a joint row.
          state_spec: the critic's global state spec.
        """
        slots: list = [None] * num_agents  # agent i -> (module, its index among the module's)
        for m, a in actors.items():
            for j, i in enumerate(a.agents):
                slots[i] = (m, j)
        act_specs = [actors[m].act_spec for m, _ in slots]
        q = q_ensemble(state_spec, joint_action_spec(act_specs), self.model_config,
                       self.twin_q)
        parts = {m: td3_parts(a.config, a.obs_spec, a.act_spec, q) for m, a in actors.items()}
        widths = {m: (sp.flat_dim(a.obs_spec), sp.flat_dim(a.act_spec))
                  for m, a in actors.items()}
        from_unit = {m: action_scaler(a.act_spec)[1] for m, a in actors.items()}
        k_max = max(k for _, k in widths.values())
        single = len(actors) == 1
        gamma, alpha = self.gamma, self.alpha
        sigma, noise_clip = self.target_smoothing_sigma, self.target_smoothing_clip
        per_agent_unit = {m: jax.vmap(p.unit_action, in_axes=(None, 1), out_axes=1)
                          for m, p in parts.items()}

        def units(policies, obs):  # {module: [N, A_m, k_m]} in the unit box
            return {m: per_agent_unit[m](policies[m], _rows_of(obs, a.agents, widths[m][0]))
                    for m, a in actors.items()}

        def data_units(actions):  # the data's actions in the unit box, per module
            return {m: jax.vmap(parts[m].to_unit, in_axes=1, out_axes=1)(
                _rows_of(actions, a.agents, widths[m][1])) for m, a in actors.items()}

        def joint(unit):  # {module: unit actions} -> [N, sum k_i] env actions, agent order
            if single:
                (m, u), = unit.items()
                return from_unit[m](u).reshape(u.shape[0], -1)
            return jnp.concatenate([from_unit[m](unit[m][:, j]) for m, j in slots], axis=1)

        def data_joint(actions):  # [N, A, k_max] padded -> [N, sum k_i], agent order
            if single:
                return actions.reshape(actions.shape[0], -1)
            return jnp.concatenate([agent_block(actions, i, widths[m][1])
                                    for i, (m, _) in enumerate(slots)], axis=1)

        def critic_loss(params, batch, rng, axis):
            noise = jnp.clip(sigma * per_example_normal(rng, (num_agents, k_max)),
                             -noise_clip, noise_clip)
            nxt = units(params["target_policy"], batch["new_obs"])
            nxt = {m: jnp.clip(u + _rows_of(noise, actors[m].agents, widths[m][1]), -1.0, 1.0)
                   for m, u in nxt.items()}
            next_q = jnp.min(q.apply(params["target_q"], batch["new_global_state"],
                                     joint(nxt)), axis=0)
            done = jnp.all(batch["terminateds"], axis=-1).astype(jnp.float32)
            y = jax.lax.stop_gradient(batch["team_rewards"] + gamma * (1.0 - done) * next_q)
            qs = q.apply(params["q"], batch["global_state"], data_joint(batch["actions"]))
            loss = jnp.sum((qs - y) ** 2, axis=0)  # qs: [k, N]
            return loss, {"qf_loss": loss, "qf_mean": qs.mean(0), "td_target_mean": y}

        owner = np.zeros((num_agents, sum(sp.flat_dim(s) for s in act_specs)), bool)
        offsets = np.cumsum([0, *(sp.flat_dim(s) for s in act_specs)])
        for i in range(num_agents):
            owner[i, offsets[i]:offsets[i + 1]] = True  # agent i's columns of the joint action

        def actor_q(q_params, state, unit, actions):
            if self.actor_q_actions == "joint":  # every agent's action its actor's
                return q.apply(q_params, state, joint(unit))[0]
            # each agent's own action its actor's, the others' the data's; mean over agents
            mixed = jnp.where(owner[:, None], joint(unit)[None], data_joint(actions)[None])
            return jax.vmap(lambda a: q.apply(q_params, state, a)[0])(mixed).mean(0)

        # "joint": each agent's action gets Q_1's whole gradient but 1/A of the BC term (a mean
        # over agents); 1/A on the Q term too keeps TD3+BC's per-agent balance of alpha ("own"
        # has it already: its Q term is a mean over the agents)
        q_share = num_agents if self.actor_q_actions == "joint" else 1

        def actor_loss(params, batch, rng, axis):
            unit = units(params["policy"], batch["obs"])
            q1 = actor_q(params["q"], batch["global_state"], unit, batch["actions"])
            lam = alpha / (q_share * jax.lax.stop_gradient(
                jnp.maximum(axis.mean(jnp.abs(q1), batch["loss_mask"]), 1e-6)))
            data = data_units(batch["actions"])
            sq = {m: (unit[m] - data[m]) ** 2 for m in actors}  # [N, A_m, k_m] each
            # the mean over agents of each agent's mean over its own action dims
            bc = (jnp.mean(next(iter(sq.values())), axis=(1, 2)) if single
                  else sum(jnp.sum(jnp.mean(x, axis=2), axis=1) for x in sq.values())
                  / num_agents)
            loss = -lam * q1 + bc
            return loss, {"policy_loss": loss, "bc_loss": bc, "q_lambda": lam}

        def init(rng):
            k1, k2 = jax.random.split(rng)
            keys = [k1] if single else list(jax.random.split(k1, len(actors)))
            return {"policy": {m: parts[m].policy.init(k) for m, k in zip(actors, keys,
                                                                           strict=True)},
                    "q": q.init(k2)}

        spec = td3_spec(self, next(iter(parts.values())), critic_loss, actor_loss,
                        DataSpec(columns=JOINT_COLUMNS))
        # acting is each module's own TD3+BC actor (`TeamActor.config`'s spec), not the team's
        return spec._replace(learning=spec.learning._replace(init=init), acting=None)
