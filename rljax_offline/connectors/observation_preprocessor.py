"""RLlib's observation preprocessors: `SingleAgentObservationPreprocessor` (one observation
in, one out, agent by agent) and `MultiAgentObservationPreprocessor` (the whole observation
dict of an env step in, e.g. other agents' positions added to each agent's observation).

RLlib's preprocessors rewrite the latest observation of each live episode in place at every
env step, so its episodes hold preprocessed observations from then on, and the learner (and
everything after the preprocessor) sees those. Ours are pure functions of the observations,
applied to every observation an episode holds (lookback included): env-to-module and learner
pipelines get the same values RLlib's episodes would hold, without mutation, and recorded
(raw) data can be preprocessed when it is read.

* `single_agent_observation_preprocessor(preprocess, output_space)`: a `Connector` piece;
  `preprocess(observation, agent_index)` takes one observation (no batch axes) and the
  index of its agent (`ctx.agent_index`, 0 in single-agent pipelines: RLlib's
  `episode.agent_id` lookup for per-agent logic) and is `vmap`ped over every row and
  column, inside `jit`.
* `multi_agent_observation_preprocessor(preprocess, output_spaces)`: runs on
  `MultiAgentEpisode`s before the agent-to-module mapping; `preprocess(observations)` takes
  `{agent_id: observation}` of the agents observed at one env step and returns the new
  observation of each of them. Env steps with the same set of agents go through one jitted,
  `vmap`ped call (padded to a power of two), so it compiles once per agent set and size
  bucket.

Example:
    >>> import jax.numpy as jnp
    >>> from rljax_offline.episode.multi_agent_builder import MultiAgentEpisodeBuilder
    >>> b = MultiAgentEpisodeBuilder("ep0")
    >>> b.add_env_reset(observations={"a": jnp.ones(2), "b": jnp.zeros(2)})
    >>> b.add_env_step({"a": jnp.ones(2), "b": jnp.ones(2)}, {"a": 0, "b": 1},
    ...                {"a": 1.0, "b": 0.0})
    >>> others = multi_agent_observation_preprocessor(
    ...     lambda obs: {a: jnp.concatenate([o] + [obs[x] for x in sorted(obs) if x != a])
    ...                  for a, o in obs.items()})
    >>> (ep,) = others.apply([b.finalize()])
    >>> ep.agent_episodes["a"].observations.tolist()
    [[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp
from rljax_offline.connectors.core import Connector
from rljax_offline.episode.batch import bucket_length
from rljax_offline.episode.multi_agent import SKIP, MultiAgentEpisode
from rljax_offline.errors import MultiAgentEpisodeError

__all__ = ["MultiAgentObservationPreprocessor", "multi_agent_observation_preprocessor",
           "single_agent_observation_preprocessor"]


def _head(tree: Any, n: int) -> Any:
    """The first `n` rows of every leaf, as numpy."""
    return jax.tree_util.tree_map(lambda x: np.asarray(x)[:n], tree)


def _spec(space: Any) -> Any:
    return None if space is None else sp.to_spec(space)


def single_agent_observation_preprocessor(
        preprocess: Callable[[Any, Any], Any],
        output_space: Callable[[Any, Any], Any] | None = None, *,
        name: str = "single_agent_observation_preprocessor") -> Connector:
    """RLlib's `SingleAgentObservationPreprocessor` as a pure piece.

    Args:
      preprocess: `(observation, agent_index) -> new observation` on one observation (a
        pytree without batch axes) and its agent's index (an int32 scalar); traced: use
        `jnp`, `jnp.where` / `lax.switch` on `agent_index` for per-agent logic.
      output_space: RLlib's `recompute_output_observation_space`: `(observation space,
        action space) -> observation space` (gymnasium spaces or our specs); None keeps
        the input space.
      name: the piece's name in `named_states`.
    """

    def out_spec(obs_spec, act_spec):
        if output_space is None or obs_spec is None:
            return obs_spec
        return _spec(output_space(obs_spec, act_spec))

    per_row = jax.vmap(jax.vmap(preprocess, in_axes=(0, None)), in_axes=(0, 0))

    def apply(state, episodes, batch, ctx):
        rows = episodes.lengths.shape[0]
        index = ctx.agent_index if ctx is not None and ctx.agent_index is not None else \
            jnp.zeros(rows, jnp.int32)
        obs = per_row(episodes.observations, jnp.asarray(index, jnp.int32))
        spec = out_spec(episodes.observation_space_spec, episodes.action_space_spec)
        return episodes.replace(observations=obs, observation_space_spec=spec), batch, state

    return Connector(init=lambda spaces: (), apply=apply,
                     out_spaces=lambda s: s._replace(observation=out_spec(s.observation,
                                                                          s.action)),
                     name=name)


@dataclasses.dataclass(frozen=True)
class MultiAgentObservationPreprocessor:
    """RLlib's `MultiAgentObservationPreprocessor` over `MultiAgentEpisode`s (see the module
    docstring). Build it with `multi_agent_observation_preprocessor`.

    Attributes:
      preprocess: `{agent_id: observation} -> {agent_id: new observation}` for one env step.
      output_spaces: `{agent_id: space} -> {agent_id: space}` (RLlib's
        `recompute_output_observation_space` on its Dict space), or None.
    """

    preprocess: Callable[[dict], dict]
    output_spaces: Callable[[dict], dict] | None = None
    _batched: Any = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        # one jitted, vmapped call per agent set (and size bucket)
        object.__setattr__(self, "_batched", jax.jit(jax.vmap(self.preprocess)))

    def observation_spaces(self, spaces: dict) -> dict:
        """The agents' observation spaces after the preprocessor.

        Args:
          spaces: `{agent_id: observation space}` before it.
        """
        return dict(spaces) if self.output_spaces is None else dict(self.output_spaces(spaces))

    def apply(self, episodes: Sequence[MultiAgentEpisode]) -> list[MultiAgentEpisode]:
        """New episodes whose every agent observation (lookback included) is the
        preprocessor's output for the env step at which the agent made it.

        Args:
          episodes: multi-agent episodes (chunks).
        """
        return [self._rewrite(ep) for ep in episodes]

    def _rewrite(self, ep: MultiAgentEpisode) -> MultiAgentEpisode:
        # env step -> {agent: index into the agent's observation arrays}
        at: dict[int, dict] = {}
        n_obs = {}
        for a, sa in ep.agent_episodes.items():
            n_obs[a] = sa._n_obs
            first = ep.env_t_started - ep.map_lookback[a]
            base = sa.len_lookback_buffer - sa.t_started
            for i, k in enumerate(ep.env_t_to_agent_t[a]):
                if k != SKIP and 0 <= base + k < n_obs[a]:
                    at.setdefault(first + i, {})[a] = base + k
        groups: dict[tuple, list[int]] = {}
        for t, present in sorted(at.items()):
            groups.setdefault(tuple(sorted(present, key=str)), []).append(t)
        new: dict = {}
        filled = {a: np.zeros(n, bool) for a, n in n_obs.items()}
        for agents, steps in groups.items():
            # env steps padded to a power of two (repeating the first): few compiled shapes
            pad = [steps[0]] * (bucket_length(len(steps), "pow2", 1) - len(steps))
            stacked = {a: jax.tree_util.tree_map(
                lambda x, rows=[at[t][a] for t in steps + pad]: np.asarray(x)[rows],
                ep.agent_episodes[a].observations) for a in agents}
            out = _head(self._batched(stacked), len(steps))
            if set(out) != set(agents):
                raise MultiAgentEpisodeError(
                    f"episode {ep.id_!r}, env step {steps[0]}: the multi-agent preprocessor "
                    f"returned observations for {sorted(map(str, out))}, expected one for "
                    f"each agent observed there: {sorted(map(str, agents))}")
            for a in agents:
                rows = [at[t][a] for t in steps]
                if a not in new:
                    new[a] = jax.tree_util.tree_map(
                        lambda x, a=a: np.zeros((n_obs[a], *np.shape(x)[1:]),
                                                np.asarray(x).dtype), out[a])
                jax.tree_util.tree_map(lambda dst, src, rows=rows: dst.__setitem__(
                    rows, np.asarray(src)), new[a], out[a])
                filled[a][rows] = True
        spaces = self.observation_spaces(ep.observation_space) \
            if ep.observation_space else {}
        agent_eps = {}
        for a, sa in ep.agent_episodes.items():
            if n_obs[a] and not filled[a].all():
                missing = int(np.flatnonzero(~filled[a])[0])
                raise MultiAgentEpisodeError(
                    f"episode {ep.id_!r}, agent {a!r}: observation {missing} (of its buffer) "
                    "has no env step in the env-step map, so no multi-agent observation "
                    "dict to preprocess it with")
            if a not in new:
                agent_eps[a] = sa
                continue
            if self.output_spaces is not None:
                space = spaces.get(a)
            else:  # spaces kept: still right only where the shapes are
                same = jax.tree_util.tree_structure(new[a]) == jax.tree_util.tree_structure(
                    sa.observations) and all(np.shape(x) == np.shape(y) for x, y in zip(
                        jax.tree_util.tree_leaves(new[a]),
                        jax.tree_util.tree_leaves(sa.observations)))
                space = sa.observation_space if same else None
            agent_eps[a] = sa.replace(observations=new[a], observation_space=space)
        if self.output_spaces is None:
            spaces = {a: s for a, s in ep.observation_space.items()
                      if a not in new or agent_eps[a].observation_space is not None}
        return ep.replace(agent_episodes=agent_eps, observation_space=spaces)


def multi_agent_observation_preprocessor(
        preprocess: Callable[[dict], dict],
        output_spaces: Callable[[dict], dict] | None = None) -> MultiAgentObservationPreprocessor:
    """RLlib's `MultiAgentObservationPreprocessor` (see the module docstring).

    Args:
      preprocess: `{agent_id: observation} -> {agent_id: new observation}`: the agents
        observed at one env step in, a new observation for each of them out; traced (`jnp`).
      output_spaces: `{agent_id: observation space} -> {agent_id: observation space}`;
        None keeps the spaces.
    """
    return MultiAgentObservationPreprocessor(preprocess, output_spaces)


def preprocessed_spaces(preprocessors: Sequence[MultiAgentObservationPreprocessor],
                        spaces: dict) -> dict:
    """The agents' observation spaces after `preprocessors`, in order.

    Args:
      preprocessors: multi-agent observation preprocessors.
      spaces: `{agent_id: observation space}` of the env.
    """
    for p in preprocessors:
        spaces = p.observation_spaces(spaces)
    return spaces

