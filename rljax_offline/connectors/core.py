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
import jax.numpy as jnp
import numpy as np

from rljax_offline import spaces as sp


class Spaces(NamedTuple):
    """Observation and action space specs (hashable; gym spaces are converted).

    Attributes:
      observation: the observation space's spec.
      action: the action space's spec.
    """

    observation: Any
    action: Any

    @classmethod
    def of(cls, observation: Any, action: Any) -> Spaces:
        return cls(sp.to_spec(observation), sp.to_spec(action))


class Context(NamedTuple):
    """What a piece may need beyond the data: an RNG key, the explore flag, module params,
    `frozen` (stateful pieces keep their state unchanged, e.g. at evaluation) and
    `written_back`: the episodes' observations before each one's latest hold what the
    env-to-module pipeline wrote back at their own step (RLlib's live episodes, see
    `apply_writing_back`), so a piece that writes back (the mean-std filter) transforms only
    the latest one.

    Attributes:
      rng: a PRNG key for pieces that sample (folded per piece).
      explore: sample actions (True) or take the greedy ones.
      params: the module's params, for pieces that run it.
      frozen: stateful pieces keep their state unchanged.
      written_back: the observations before each episode's latest were written back.
      agent_index: in multi-agent pipelines, the `[B]` index of the agent each
        `EpisodeBatch` row belongs to (its position in the pipeline's agent ids; -1 for a
        padding row), for pieces that treat agents apart
        (`single_agent_observation_preprocessor`, `mean_std_filter_per_agent`); None in
        single-agent pipelines (every row is agent 0).
    """

    rng: Any = None
    explore: Any = False
    params: Any = None
    frozen: Any = False
    written_back: Any = False
    agent_index: Any = None


EMPTY_CONTEXT = Context()


class Connector(NamedTuple):
    """A piece (or pipeline). `lookback`: how many past steps before an episode's current
    one the piece reads (frame stacking of N: N - 1), so readers and env runners keep just
    enough; a pipeline needs the largest of its pieces'. `name`: the piece's name in
    `named_states` (default: its factory's name); `pieces`: a pipeline's pieces.
    `writes_back`: as RLlib's env-to-module `MeanStdFilter` (`set_observations(at_indices=-1)`),
    the piece's output observations are what the live episode holds from then on (see
    `apply_writing_back`). `role`: what the piece is, where the actor or export must know
    (one of `ROLES`; "" for none).

    Attributes:
      init: `init(spaces) -> state`; `()` for a stateless piece.
      apply: `apply(state, episodes, batch, ctx) -> (episodes, batch, state)`, pure.
      out_spaces: `out_spaces(spaces) -> spaces`, the spaces of the piece's output.
      lookback: past steps the piece reads before an episode's current one.
      name: the piece's name in `named_states`.
      pieces: a pipeline's pieces (empty for a piece).
      writes_back: the output observations replace the live episode's latest one.
      role: what the piece is for the actor or export (one of `ROLES`; "" for none).
    """

    init: Callable[[Spaces], Any]
    apply: Callable[..., tuple]
    out_spaces: Callable[[Spaces], Spaces]
    lookback: int = 0
    name: str = ""
    pieces: tuple = ()
    writes_back: bool = False
    role: str = ""


# A piece's declared `role`. Its lookback counts past observations unless the role says
# otherwise: "prev_actions_rewards" reads past actions / rewards into the observations
# (RLlib's `PrevActionsPrevRewards`), "states" the module's `state_out` after the previous
# step (the next `state_in`); "observations" puts the observations into the batch.
OBSERVATIONS, PREV_ACTIONS_REWARDS, STATES = "observations", "prev_actions_rewards", "states"
ROLES = (OBSERVATIONS, PREV_ACTIONS_REWARDS, STATES)


def stateless(apply: Callable, out_spaces: Callable[[Spaces], Spaces] | None = None,
              lookback: int = 0, role: str = "") -> Connector:
    """A piece without state from `apply(episodes, batch, ctx) -> (episodes, batch)`.

    Args:
      apply: `apply(episodes, batch, ctx) -> (episodes, batch)`, pure.
      out_spaces: the output spaces from the input ones (default: unchanged).
      lookback: past steps `apply` reads before an episode's current one.
      role: what the piece is for the actor or export (one of `ROLES`; "" for none).

    Returns:
      The `Connector`, with state `()`.

    Example:
        >>> def double_rewards(episodes, batch, ctx):
        ...     return episodes, {**batch, "rewards": 2 * batch["rewards"]}
        >>> piece = stateless(double_rewards)
        >>> _, batch, _ = piece.apply(piece.init(None), None, {"rewards": 1.0}, Context())
        >>> batch["rewards"]
        2.0
    """

    def _apply(state, episodes, batch, ctx):
        episodes, batch = apply(episodes, batch, ctx)
        return episodes, batch, state

    return Connector(init=lambda spaces: (), apply=_apply,
                     out_spaces=out_spaces or (lambda spaces: spaces), lookback=int(lookback),
                     name=_factory_name(apply), role=role)


def _factory_name(fn: Callable) -> str:
    """`frame_stack` for a closure `frame_stack.<locals>.apply`; else the function's name."""
    qualname = getattr(fn, "__qualname__", "") or getattr(fn, "__name__", "piece")
    return qualname.split(".<locals>")[0] if ".<locals>" in qualname else qualname


def piece_name(piece: Connector) -> str:
    """The piece's name in `named_states`: its `name`, "pipeline", or its factory's name.

    Args:
      piece: the piece or pipeline.
    """
    return piece.name or ("pipeline" if piece.pieces else _factory_name(piece.apply))


def named_states(connector: Connector, state: Any) -> Any:
    """A pipeline's state as `{piece name: state}` (nested for nested pipelines; a repeated
    name gets `_1`, `_2`, ... in order): what a checkpoint shows a reader. The pipeline itself
    keeps the positional tuple `apply` takes.

    Args:
      connector: the pipeline (or piece).
      state: its positional state, as `init` or `apply` returned it.

    Returns:
      `{piece name: state}` (a stateless piece's state is `()`).
    """
    if not connector.pieces:
        return state
    out, seen = {}, {}
    for piece, s in zip(connector.pieces, state):
        name = piece_name(piece)
        k = seen.get(name, 0)
        seen[name] = k + 1
        out[name if k == 0 else f"{name}_{k}"] = named_states(piece, s)
    return out


def _apply_piece(piece: Connector, state, episodes, batch, ctx) -> tuple:
    return piece.apply(state, episodes, batch, ctx)


def _run_pieces(pieces: tuple, state, episodes, batch, ctx: Context, run_piece: Callable):
    """The one walk of a pipeline: `run_piece(piece, state, episodes, batch, ctx)` for each
    piece in order, the RNG folded with the piece's position. A pipeline's `apply` runs each
    piece's own `apply`; `apply_writing_back` runs its own step, to see the pieces inside."""
    if not isinstance(state, tuple) or len(state) != len(pieces):
        raise ValueError(f"this pipeline needs a state for {len(pieces)} pieces (from its "
                         f"init(spaces)), got {state!r:.80}")
    new_states = []
    for i, (p, s) in enumerate(zip(pieces, state)):
        if ctx.rng is not None:
            ctx = ctx._replace(rng=jax.random.fold_in(ctx.rng, i))
        episodes, batch, s = run_piece(p, s, episodes, batch, ctx)
        new_states.append(s)
    return episodes, batch, tuple(new_states)


def pipeline(*pieces: Connector) -> Connector:
    """Runs `pieces` in order; the state is the tuple of the pieces' states.

    Pipelines nest, and a pipeline is a `Connector` like its pieces: `jax.jit(pipe.apply)`
    compiles the whole chain, its `lookback` is the largest of its pieces' and its
    `out_spaces` chains theirs.

    Args:
      *pieces: the pieces (or pipelines) in order.

    Returns:
      The pipeline.
    """
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
        return _run_pieces(pieces, state, episodes, batch, ctx, _apply_piece)

    def out_spaces(spaces):
        for p in pieces:
            spaces = p.out_spaces(spaces)
        return spaces

    return Connector(init=init, apply=apply, out_spaces=out_spaces,
                     lookback=max((p.lookback for p in pieces), default=0), name="pipeline",
                     pieces=tuple(pieces), writes_back=any(p.writes_back for p in pieces))


def _leaves(connector: Connector, state: Any) -> list[tuple[str, Any]]:
    """`(name, state)` of each piece that is not a pipeline, nested pipelines flattened in
    order, a repeated name numbered as in `named_states`."""
    flat: list[tuple[str, Any]] = []

    def walk(piece, s):
        if piece.pieces:
            for p, ps in zip(piece.pieces, s):
                walk(p, ps)
        else:
            flat.append((piece_name(piece), s))

    walk(connector, state)
    seen: dict[str, int] = {}
    out = []
    for name, s in flat:
        k = seen.get(name, 0)
        seen[name] = k + 1
        out.append((name if k == 0 else f"{name}_{k}", s))
    return out


def _same_layout(a: Any, b: Any, *, dtypes: bool = True) -> bool:
    """Whether two pytrees have one structure and leaf shapes (and, with `dtypes`, dtypes)."""
    leaves_a, tree_a = jax.tree_util.tree_flatten(a)
    leaves_b, tree_b = jax.tree_util.tree_flatten(b)
    return tree_a == tree_b and all(
        np.shape(x) == np.shape(y) and (not dtypes or x.dtype == y.dtype)
        for x, y in zip(leaves_a, leaves_b))


def share_states(target: Connector, target_state: Any, source: Connector,
                 source_state: Any) -> Any:
    """`target_state` with each stateful piece's state taken from the same-named piece of
    `source` (the k-th piece of a name from the k-th of that name; nested pipelines
    flattened), where both hold state of one layout: how the env-to-module pipeline acts with
    the state the learner pipeline fitted (a mean-std filter's statistics). Pieces by name,
    not position, so pieces that only one pipeline has do not shift the others.

    Args:
      target: the pipeline whose state is returned (e.g. the env-to-module one).
      target_state: its current state.
      source: the pipeline whose pieces' states are taken (e.g. the learner one).
      source_state: its state.

    Returns:
      `target_state` with the shared pieces' states replaced.
    """
    learned = dict(_leaves(source, source_state))
    names = iter(name for name, _ in _leaves(target, target_state))

    def rebuild(piece, s):
        if piece.pieces:
            return tuple(rebuild(p, ps) for p, ps in zip(piece.pieces, s))
        other = learned.get(next(names))
        shared = (other is not None and jax.tree_util.tree_leaves(s)
                  and _same_layout(s, other, dtypes=False))
        return other if shared else s

    return rebuild(target, target_state)


def apply_writing_back(connector: Connector, state, episodes, batch, ctx=None):
    """`connector.apply` that also returns the episodes' observations as RLlib's live episodes
    hold them after the call: each episode's latest observation replaced by the output of the
    last piece that writes back (`Connector.writes_back`, e.g. the env-to-module mean-std
    filter), where that output has the input's structure, shapes and dtypes (else, and without
    such a piece, the input observations).

    Returns `(episodes, batch, state, observations)`. Stepping episodes as RLlib does: keep
    `observations` as the episodes' observations, append the env's next one and call again
    with `Context(written_back=True)`; a filter then frame stacking reads each past frame as
    normalized at its own step. Same RNG folding as `connector.apply`, so the results agree.

    Args:
      connector: the pipeline (or piece) to apply.
      state: its state.
      episodes: the `EpisodeBatch` of the episodes being stepped.
      batch: the batch so far (usually `{}`).
      ctx: the `Context` (default: an empty one).
    """
    ctx = ctx if ctx is not None else EMPTY_CONTEXT
    written = [None]

    def run(piece, s, eps, b, c):
        if piece.pieces:
            return _run_pieces(piece.pieces, s, eps, b, c, run)
        eps, b, s = piece.apply(s, eps, b, c)
        if piece.writes_back:
            written[0] = eps.observations
        return eps, b, s

    before = episodes.observations
    out_eps, out_batch, new_state = run(connector, state, episodes, batch, ctx)
    observations = before
    if written[0] is not None and _same_layout(written[0], before):
        latest = (episodes.len_lookback_buffer + episodes.lengths)[:, None] == \
            jnp.arange(jax.tree_util.tree_leaves(before)[0].shape[1])[None, :]

        def put(old, new):
            m = latest.reshape(*latest.shape, *([1] * (old.ndim - 2)))
            return jnp.where(m, new.astype(old.dtype), old)

        observations = jax.tree_util.tree_map(put, before, written[0])
    return out_eps, out_batch, new_state, observations

