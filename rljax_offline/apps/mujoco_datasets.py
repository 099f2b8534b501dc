"""D4RL-style MuJoCo data sets made here (no download): Hopper, HalfCheetah and Walker2d, each
in D4RL's five kinds, named as `apps.recipes` names its sets (`hopper-medium`,
`walker2d-medium-replay`, ...):

* `random`: a uniform random policy;
* `medium`: SAC's policy at about a third of the way from random to expert return;
* `medium-replay`: every episode the online SAC learner sampled up to the medium checkpoint
  (its replay buffer);
* `medium-expert`: half the steps from the medium policy, half from the expert;
* `expert`: SAC's best policy of the run.

The SAC run behind them is trained once per env, seed and env-step budget and cached
(`apps.mujoco_policies`). Episodes are whole (recording stops at the first finished episode
that reaches the size), `terminated` and `truncated` are the env's, and every step carries
the behaviour policy's `action_logp` and `action_dist_inputs` (SAC: sampled with
`explore=True`, a tanh-squashed Gaussian; random: the uniform, see `uniform_policy`), and
every episode its behaviour in `custom_data["behavior"]`. Beside the Parquet files,
`dataset.json` holds the recipe and D4RL-style normalization constants measured here:
`ref_min_score` (the random policy's mean return) and `ref_max_score` (the expert's), for
`normalized_score`.

This module is what the sets are (it loads no JAX, so `rljax-offline datasets list` is quick);
`apps.mujoco_record` makes them.

Example:
    >>> from rljax_offline.apps.mujoco_record import make_dataset
    >>> meta = make_dataset("hopper-medium", "/tmp/hopper-medium", env_steps=30_000)
    >>> normalized_score(1200.0, "/tmp/hopper-medium")
"""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple

from rljax_offline.errors import UsageError

RECIPE_VERSION = 1
META_FILE = "dataset.json"

ENVS = {"hopper": "Hopper-v5", "halfcheetah": "HalfCheetah-v5", "walker2d": "Walker2d-v5"}
KINDS = {
    "random": "uniform random actions",
    "medium": "SAC's policy at about a third of the way from random to expert return, sampled",
    "medium-replay": "the online SAC learner's episodes up to the medium checkpoint",
    "medium-expert": "half the steps from the medium policy, half from the expert, sampled",
    "expert": "SAC's best policy of the run, sampled",
}
# D4RL's published reference returns (d4rl/infos.py, the -v2 MuJoCo sets on the older envs),
# kept in dataset.json for context: ours are measured here on the -v5 envs.
D4RL_REF = {"hopper": (-20.272305, 3234.3), "halfcheetah": (-280.178953, 12135.0),
            "walker2d": (1.629008, 4592.3)}
DEFAULT_NUM_STEPS = 50_000
DEFAULT_ENV_STEPS = 30_000


class Recipe(NamedTuple):
    """One MuJoCo data set: env, kind, what its behaviour is."""

    name: str
    env_id: str
    kind: str
    doc: str


RECIPES: dict[str, Recipe] = {
    f"{short}-{kind}": Recipe(f"{short}-{kind}", env_id, kind, f"{env_id}: {doc}")
    for short, env_id in ENVS.items() for kind, doc in KINDS.items()}


def recipe(name: str) -> Recipe:
    """The recipe called `name`; a one-line error listing the known ones."""
    try:
        return RECIPES[name]
    except KeyError:
        raise UsageError(f"unknown MuJoCo data set {name!r}; known: "
                         f"{', '.join(sorted(RECIPES))}") from None


def read_meta(dataset: str | dict) -> dict:
    """The `dataset.json` of a data set folder (a dict is returned as it is)."""
    if isinstance(dataset, dict):
        return dataset
    path = os.path.join(dataset, META_FILE) if os.path.isdir(dataset) else dataset
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise UsageError(f"{path!r} not found: not a folder made by `rljax-offline datasets "
                         "make`") from None


def normalized_score(episode_return: Any, dataset: str | dict) -> Any:
    """D4RL's normalized score, `100 * (R - ref_min_score) / (ref_max_score - ref_min_score)`,
    with the constants of `dataset` (its folder or its `dataset.json` as a dict): 0 is the
    random policy, 100 the expert, both as measured when the data was made.

    Args:
      episode_return: a return, or an array of them.
      dataset: the data set's folder, or its `dataset.json` as a dict.
    """
    meta = read_meta(dataset)
    lo, hi = float(meta["ref_min_score"]), float(meta["ref_max_score"])
    if not hi > lo:
        raise UsageError(f"data set {meta.get('name')!r} has ref_max_score {hi} <= "
                         f"ref_min_score {lo}: its expert never beat the random policy")
    return 100.0 * (episode_return - lo) / (hi - lo)

