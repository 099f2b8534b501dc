"""The connector algebra: pipelines compose and nest, states are checked, defaults can be left
out, and a custom piece (RLlib guide's AddNewColumnToBatch, AddPast3Rewards) is a few lines
that run under jit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from connector_testlib import ACT, OBS, random_episodes, run_jit

from rljax_offline import EpisodeBatch
from rljax_offline.connectors import (
    Connector,
    Context,
    Spaces,
    default_env_to_module,
    default_learner,
    default_module_to_env,
    flatten_observations,
    frame_stack,
    mean_std_filter,
    pipeline,
    stateless,
)

SPACES = Spaces.of(OBS, ACT)


def test_custom_pieces_like_the_guide():
    """RLlib's guide: AddNewColumnToBatch and AddPast3Rewards, each a few lines here."""

    def add_new_column(episodes, batch, ctx):
        return episodes, {**batch, "new_col": jnp.ones(episodes.batch_size)}

    def add_past_3_rewards(episodes, batch, ctx):
        L = episodes.len_lookback_buffer
        rew = jnp.pad(jnp.where(episodes.lookback_mask, episodes.rewards, 0.0), [(0, 0), (3, 1)])
        idx = 3 + L + episodes.lengths[:, None] + jnp.arange(-3, 0)[None]
        return episodes, {**batch, "past_3_rewards": jnp.take_along_axis(rew, idx, 1)}

    pipe = default_env_to_module(SPACES, stateless(add_new_column),
                                 stateless(add_past_3_rewards))
    eps = random_episodes(seed=8)
    _, batch, _ = run_jit(pipe, SPACES, eps)
    assert batch["obs"].shape == (5, 3) and np.all(np.asarray(batch["new_col"]) == 1)
    for i, ep in enumerate(eps):
        np.testing.assert_allclose(batch["past_3_rewards"][i],
                                   ep.get_rewards(slice(-3, None), fill=0.0))


def test_custom_stateful_piece_carries_its_state():
    """A piece with state: counts the timesteps it has seen, as an (init, apply) pair."""
    counter = Connector(
        init=lambda spaces: jnp.zeros((), jnp.int32),
        apply=lambda n, eps, batch, ctx: (eps, batch, n + jnp.sum(eps.lengths)),
        out_spaces=lambda spaces: spaces)
    pipe = default_learner(SPACES, counter)
    state = pipe.init(SPACES)
    eps = random_episodes(seed=3)
    for _ in range(2):
        _, _, state = run_jit(pipe, SPACES, eps, state=state)
    assert int(state[0]) == 2 * sum(len(e) for e in eps)


def test_defaults_can_be_left_out_and_pipelines_nest():
    assert default_learner(SPACES, add_default_connectors=False).init(SPACES) == ()
    assert default_env_to_module(SPACES, add_default_connectors=False).init(SPACES) == ()
    assert default_module_to_env(SPACES, add_default_connectors=False).init(SPACES) == ()
    inner = pipeline(frame_stack(2), mean_std_filter(as_learner_connector=True))
    outer = pipeline(inner, flatten_observations())
    assert outer.out_spaces(SPACES).observation.shape == (6,)
    state = outer.init(SPACES)
    assert isinstance(state[0][1].mean, jax.Array)
    _, batch, state = run_jit(pipeline(outer, default_learner(outer.out_spaces(SPACES))),
                              SPACES, random_episodes(2), state=(state, ((),) * 3))
    assert batch["obs"].shape[-1] == 6 and int(state[0][0][1].count) > 0
    with pytest.raises(ValueError, match="state for 2 pieces"):
        inner.apply((), EpisodeBatch.from_episodes(random_episodes(1)), {}, Context())
    with pytest.raises(TypeError, match="not a Connector"):
        pipeline(lambda x: x)


def test_custom_pieces_go_before_the_defaults():
    """The defaults read what the custom pieces wrote: a frame-stacked obs comes out."""
    pipe = default_learner(SPACES, frame_stack(2))
    assert pipe.out_spaces(SPACES).observation.shape == (6,)
    _, batch, _ = run_jit(pipe, SPACES, random_episodes(3))
    assert batch["obs"].shape[-1] == 6 and batch["new_obs"].shape[-1] == 6


def test_pipeline_gives_each_piece_its_own_rng():
    seen = []

    def grab(episodes, batch, ctx):
        return episodes, {**batch, f"k{len(batch)}": jax.random.uniform(ctx.rng)}

    pipe = pipeline(stateless(grab), stateless(grab))
    _, batch, _ = run_jit(pipe, SPACES, random_episodes(1),
                          ctx=Context(rng=jax.random.PRNGKey(0)))
    seen = [float(v) for v in batch.values()]
    assert seen[0] != seen[1]


def test_pieces_declare_their_lookback_and_pipeline_states_are_named():
    from rljax_offline.connectors import (
        add_states,
        default_env_to_module,
        mean_std_filter,
        named_states,
        prev_actions_rewards,
    )

    assert frame_stack(4).lookback == 3 and prev_actions_rewards(2, 5).lookback == 5
    assert add_states(as_learner_connector=False).lookback == 1
    pipe = default_env_to_module(SPACES, frame_stack(3), mean_std_filter(),
                                 prev_actions_rewards(1, 1))
    assert pipe.lookback == 2
    named = named_states(pipe, pipe.init(SPACES))
    assert list(named)[:3] == ["frame_stack", "mean_std_filter", "prev_actions_rewards"]
    assert float(named["mean_std_filter"].count) == 0.0
    nested = pipeline(pipeline(mean_std_filter()), mean_std_filter())
    assert set(named_states(nested, nested.init(SPACES))) == {"pipeline", "mean_std_filter"}


def test_share_states_takes_each_same_named_pieces_state_not_the_same_position():
    from rljax_offline.connectors.core import share_states

    learner = pipeline(default_learner(SPACES, mean_std_filter(as_learner_connector=True)),
                       stateless(lambda e, b, c: (e, b)))
    fitted = jax.tree_util.tree_map(lambda x: x + 1, learner.init(SPACES))
    # A piece in front only in the env-to-module pipeline: the filter is second there.
    env_to_module = default_env_to_module(SPACES, stateless(lambda e, b, c: (e, b)),
                                          mean_std_filter())
    fresh = env_to_module.init(SPACES)
    shared = share_states(env_to_module, fresh, learner, fitted)
    assert float(shared[1].count) == float(fitted[0][0].count) == 1.0
    jax.tree_util.tree_map(np.testing.assert_array_equal, shared[0], fresh[0])
    # A same-named piece whose state has another layout keeps its own (fresh) state.
    other = pipeline(frame_stack(2), mean_std_filter())
    other_fitted = jax.tree_util.tree_map(lambda x: x + 1, other.init(SPACES))
    kept = share_states(env_to_module, fresh, other, other_fitted)
    assert float(kept[1].count) == 0.0
