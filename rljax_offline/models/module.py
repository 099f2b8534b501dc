"""`Module`: the one network protocol. Policies, value networks and Q networks are all a
`Module`, a NamedTuple of pure functions (as optax's `GradientTransformation` is), so the
learner's losses, the actor and export speak to every network the same way:

* `init(rng) -> params`;
* `apply(params, obs [N, ...], *args) -> [N, ...]`: the outputs of the latest observations
  (feed-forward modules; a recurrent one needs a state and raises);
* `steps(params, batch, with_next=False, state_in=None) -> (rows [N, ...], next rows or None)`:
  what `head` takes at every timestep of a learner batch (and at the next observations), a
  recurrent module unrolled from `state_in` (see `sequences.step_outputs`). `state_in=None`
  is the module's own default: a policy reads the batch's `state_in` (its recorded state),
  a value or Q network starts from its initial state (the batch's `state_in` is the policy's);
* `head(params, rows, *args) -> [N, ...]`: the rest of the network after `steps` (an MLP, or
  a linear layer after a cell); a policy's `steps` are already its outputs, its head is the
  identity;
* recurrent modules: `forward(params, {obs [B, T, ...], state_in, seq_lens}) -> (out [B, T,
  ...], state_out)`, `initial_state(batch_size=None)` and, for policies, `max_seq_len`;
* policies: `dist`, the distribution of their outputs (`action_dist_inputs`), and the specs
  they were built for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from rljax_offline.models import sequences
from rljax_offline.models.distributions import Distribution


def identity_head(params, rows, *args):
    """A policy's head: its `steps` are already its outputs."""
    del params, args
    return rows


class Module(NamedTuple):
    """A network as pure functions (see the module docstring).

    Attributes:
      init: `rng -> params` (None for a parameterless module).
      apply: `(params, obs [N, ...], *args) -> [N, ...]`, outputs of the latest observations.
      steps: `(params, batch, with_next=False, state_in=None) -> (rows, next rows or None)`.
      head: `(params, rows, *args) -> [N, ...]`, the network after `steps`.
      forward: recurrent: `(params, batch) -> (out [B, T, ...], state_out)`.
      initial_state: recurrent: `(batch_size=None) -> the zero state`.
      max_seq_len: recurrent policies: the learner's sequence length.
      dist: policies: the distribution of their outputs.
      obs_spec: the observation space's spec it was built for.
      act_spec: the action space's spec it was built for.
      takes_key: `apply` is `(params, key, obs)`: a policy that draws when it acts.
    """

    init: Callable[[jax.Array], Any] | None
    apply: Callable
    steps: Callable | None = None
    head: Callable = identity_head
    forward: Callable | None = None          # recurrent: (params, batch) -> (out, state_out)
    initial_state: Callable | None = None    # recurrent: (batch_size=None) -> the zero state
    max_seq_len: int | None = None           # recurrent policies: the learner's sequences
    dist: Distribution | None = None         # policies: the action distribution
    obs_spec: Any = None
    act_spec: Any = None
    takes_key: bool = False                  # apply(params, key, obs): it draws when it acts

    @property
    def is_stateful(self) -> bool:
        return self.forward is not None

    def dist_inputs(self, params, batch: dict) -> jax.Array:
        """`action_dist_inputs` for a learner batch: from `obs` `[N, ...]`, or for a
        recurrent policy from `obs` `[B, T, ...]`, `state_in`, `seq_lens` (`[B, T, d]`)."""
        if self.forward is not None:
            return self.forward(params, batch)[0]
        return self.apply(params, batch["obs"])

    def logp(self, params, obs, actions):
        return self.dist.logp(self.apply(params, obs), actions)

    def entropy(self, params, obs):
        return self.dist.entropy(self.apply(params, obs))

    def greedy_action(self, params, obs):
        return self.dist.greedy(self.apply(params, obs))

    def sample_action(self, params, obs, rng):
        return self.dist.sample(self.apply(params, obs), rng)


def policy_module(init: Callable | None, apply: Callable, dist: Distribution | None, *,
                  forward: Callable | None = None, initial_state: Callable | None = None,
                  max_seq_len: int | None = None, obs_spec: Any = None,
                  act_spec: Any = None) -> Module:
    """A policy `Module`: its `steps` are its `action_dist_inputs` at every step, a recurrent
    one unrolled from the batch's own `state_in` unless one is given. Build a changed policy
    with this again, not `_replace(forward=...)`: `steps` closes over `apply` and `forward`.

    Args:
      init: `rng -> params`.
      apply: `(params, obs) -> action_dist_inputs`.
      dist: the distribution of the outputs.
      forward: recurrent: `(params, batch) -> (out, state_out)`.
      initial_state: recurrent: `(batch_size=None) -> the zero state`.
      max_seq_len: recurrent: the learner's sequence length.
      obs_spec: the observation space's spec.
      act_spec: the action space's spec.
    """

    def steps(params, batch, with_next=False, state_in=None):
        state_in = batch.get("state_in") if state_in is None else state_in
        return sequences.step_outputs(apply, forward, params, batch, state_in, with_next)

    return Module(init=init, apply=apply, steps=steps, forward=forward,
                  initial_state=initial_state, max_seq_len=max_seq_len, dist=dist,
                  obs_spec=obs_spec, act_spec=act_spec)


def acting_module(act: Callable, dist: Distribution | None, policy: Module | None = None,
                  policy_network: str | None = "policy", takes_key: bool = False) -> Module:
    """The `Module` an algorithm acts with, on its whole params: `act(params, obs)` for a
    feed-forward step, and a recurrent `policy` run on `params[policy_network]` (all the
    params when `policy_network` is None: a module of several networks, PPO's recurrent
    actor-critic). What the actor and export take.

    Args:
      act: `(params, obs) -> action_dist_inputs` on the whole params (`(params, key, obs)`
        where `takes_key`).
      dist: the distribution of `act`'s outputs.
      policy: a recurrent policy `Module`, or None.
      policy_network: the params entry `policy` runs on (None: all the params).
      takes_key: `act` takes a key (a feed-forward policy that draws when it acts).
    """
    if policy is None or not policy.is_stateful:
        return Module(init=None, apply=act, dist=dist, takes_key=takes_key)
    if takes_key:
        raise ValueError("a recurrent acting policy that takes a key is not supported")

    def on_policy_params(params):
        return params if policy_network is None else params[policy_network]

    return policy_module(None, act, dist,
                         forward=lambda params, batch: policy.forward(on_policy_params(params),
                                                                      batch),
                         initial_state=policy.initial_state, max_seq_len=policy.max_seq_len,
                         obs_spec=policy.obs_spec, act_spec=policy.act_spec)


def callable_module(fn: Callable) -> Module:
    """A plain callable `obs -> action_dist_inputs` (or actions, without a module-to-env
    pipeline) as a parameterless `Module` for the actor; it must be traceable by `jax.jit`.

    Args:
      fn: `obs -> action_dist_inputs`.
    """
    return Module(init=None, apply=lambda params, obs: fn(obs))
