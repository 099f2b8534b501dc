"""Mixed-quality offline data sets on which behavior cloning fails and offline RL can succeed.

BC learns the average behaviour of the data. Epsilon-random mixing alone does not defeat it with
two actions: the expert's action stays the majority in every state, so BC recovers the expert.
The recipes here instead put poor actions on most steps of the states that every policy visits
(the start and near-upright states), with a few complete expert episodes among them. Rewards
tell the good actions from the poor ones, so CQL, IQL and MARWIL can pick the good ones; BC
copies the poor majority.

* `cartpole-mixed`: 5% expert episodes (500 steps each) and 95% episodes whose actions are the
  expert's flipped with probability 0.7 (about 13 steps each, all near the start state).
  BC scores well under 100; the expert 500.
* `pendulum-mixed`: 10% expert episodes, 90% uniformly random torques. BC scores about -1200;
  the expert about -170.
* `pendulum-expert-heavy`: each episode drawn with equal weight from the scripted expert, the
  expert with N(0, 0.5) torque noise, the expert with N(0, 1.5) torque noise, and uniformly
  random torques (about 50 of each in 200 episodes): half the data near the expert, where
  `pendulum-mixed` is mostly random (the TD3+BC / IQL parity runs at 20,000 updates).

The `-small` variants are the same mixes with fewer episodes, for tests (about a second to record).

Example:
    >>> from rljax_offline.apps.recipes import record_mixed
    >>> files = record_mixed("cartpole-mixed", "/tmp/cartpole_mixed")
"""

from __future__ import annotations

from typing import NamedTuple


class Recipe(NamedTuple):
    """How a mixed data set is recorded: env, behaviour mix (see `acting.behavior`), size."""

    env_id: str
    mix: str
    num_episodes: int
    doc: str


RECIPES: dict[str, Recipe] = {
    "cartpole-mixed": Recipe("CartPole-v1", "expert:0.05,flip0.7:0.95", 1000,
                             "CartPole: 5% expert episodes, 95% expert flipped with p=0.7"),
    "cartpole-mixed-small": Recipe("CartPole-v1", "expert:0.05,flip0.7:0.95", 300,
                                   "cartpole-mixed with 300 episodes (about 13k steps)"),
    "pendulum-mixed": Recipe("Pendulum-v1", "expert:0.1,random:0.9", 200,
                             "Pendulum: 10% expert episodes, 90% uniform random torques"),
    "pendulum-expert-heavy": Recipe(
        "Pendulum-v1", "expert:0.25,noise0.5:0.25,noise1.5:0.25,random:0.25", 200,
        "Pendulum: expert, expert + N(0, 0.5), expert + N(0, 1.5), uniform random, a quarter "
        "each"),
    "pendulum-mixed-small": Recipe("Pendulum-v1", "expert:0.1,random:0.9", 50,
                                   "pendulum-mixed with 50 episodes (10k steps)"),
}


def recipe(name: str) -> Recipe:
    """The recipe called `name`; a clear error listing the known ones."""
    try:
        return RECIPES[name]
    except KeyError:
        raise ValueError(f"unknown data set recipe {name!r}; known: {sorted(RECIPES)}") from None


def record_mixed(name: str, path: str, *, num_episodes: int | None = None, seed: int = 0,
                 num_envs: int = 8, progress: bool = False, **write_options) -> list[str]:
    """Records recipe `name` to Parquet under `path` and returns the files written.

    Same seed, same data.

    Args:
      name: a recipe (`RECIPES`: "cartpole-mixed", "pendulum-mixed", ...).
      path: the output folder.
      num_episodes: overrides the recipe's size.
      seed: seeds the envs and the behaviour mix.
      num_envs: vectorised envs recording together.
      progress: show a progress bar.
      **write_options: go to `EpisodeWriter` (e.g. `output_write_episodes=False` for
        tabular rows).
    """
    # start-up: acting.env_runner (with the data package and pyarrow) costs ~50 ms, and
    # `rljax-offline --help` loads this module for the recipe names
    from rljax_offline.acting.env_runner import record_expert

    r = recipe(name)
    return record_expert(r.env_id, path, num_episodes=num_episodes or r.num_episodes, seed=seed,
                         num_envs=num_envs, progress=progress, mix=r.mix, **write_options)
