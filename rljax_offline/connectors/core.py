"""The connector algebra: a piece is a NamedTuple of pure functions, as optax's
`GradientTransformation` is `(init, update)`.

* `init(spaces) -> state`: the piece's state from its input spaces (`()` when stateless).
* `apply(state, episodes, batch, ctx) -> (episodes, batch, state)`: pure and `jit`-able;
  `episodes` is an `EpisodeBatch`, `batch` a dict of arrays (RLlib's column names).
* `out_spaces(spaces) -> spaces`: the spaces after the piece (RLlib's
  `recompute_output_observation_space`); a pipeline's `out_spaces` is what the policy is built
  from.

`pipeline(*pieces)` composes pieces into one `Connector`; pipelines nest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax

from rljax_offline import spaces as sp


class Spaces(NamedTuple):
    """Observation and action space specs (hashable; gym spaces are converted)."""

    observation: Any
    action: Any

    @classmethod
    def of(cls, observation: Any, action: Any) -> Spaces:
        return cls(sp.to_spec(observation), sp.to_spec(action))


class Context(NamedTuple):
    """What a piece may need beyond the data: an RNG key, the explore flag, module params,
    and `frozen` (stateful pieces keep their state unchanged, e.g. at evaluation)."""

    rng: Any = None
    explore: Any = False
    params: Any = None
    frozen: Any = False


EMPTY_CONTEXT = Context()


class Connector(NamedTuple):
    init: Callable[[Spaces], Any]
    apply: Callable[..., tuple]
    out_spaces: Callable[[Spaces], Spaces]


def stateless(apply: Callable, out_spaces: Callable[[Spaces], Spaces] | None = None
              ) -> Connector:
    """A piece without state from `apply(episodes, batch, ctx) -> (episodes, batch)`."""

    def _apply(state, episodes, batch, ctx):
        episodes, batch = apply(episodes, batch, ctx)
        return episodes, batch, state

    return Connector(init=lambda spaces: (), apply=_apply,
                     out_spaces=out_spaces or (lambda spaces: spaces))


def pipeline(*pieces: Connector) -> Connector:
    """Runs `pieces` in order; the state is the tuple of the pieces' states."""
    for i, p in enumerate(pieces):
        if not isinstance(p, Connector):
            raise TypeError(f"pipeline piece {i} is a {type(p).__name__}, not a Connector")

    def init(spaces):
        states = []
        for p in pieces:
            states.append(p.init(spaces))
            spaces = p.out_spaces(spaces)
        return tuple(states)

    def apply(state, episodes, batch, ctx=None):
        ctx = EMPTY_CONTEXT if ctx is None else ctx
        if not isinstance(state, tuple) or len(state) != len(pieces):
            raise ValueError(f"this pipeline needs a state for {len(pieces)} pieces (from its "
                             f"init(spaces)), got {state!r:.80}")
        new_states = []
        for i, (p, s) in enumerate(zip(pieces, state)):
            if ctx.rng is not None:
                ctx = ctx._replace(rng=jax.random.fold_in(ctx.rng, i))
            episodes, batch, s = p.apply(s, episodes, batch, ctx)
            new_states.append(s)
        return episodes, batch, tuple(new_states)

    def out_spaces(spaces):
        for p in pieces:
            spaces = p.out_spaces(spaces)
        return spaces

    return Connector(init=init, apply=apply, out_spaces=out_spaces)
