"""Multi-agent benchmark data sets made here from scripted policies (no download, no RL run):
mpe2's cooperative envs, each with an epsilon ladder of its scripted heuristic
(`acting.multi_agent_experts`), named `mpe-ENV-heuristic-epsE`, and D4RL's kinds made from
one IPPO run per env (`apps.multi_agent_ippo`), named `mpe-ENV-ippo-KIND` (KIND random,
medium, medium-replay, expert):

* `simple_spread` (3 agents, 3 landmarks, 25 steps, Discrete(5) moves; one shared module
  `spread`): epsilon 0.0 (the heuristic), 0.1, 0.3, 0.5, 0.7 and 1.0 (uniform random);
* `simple_spread_continuous` (the same env with `continuous_actions=True`, Box(0, 1, (5,))):
  the heuristic's action plus truncated Gaussian noise (sigma 0.1), epsilon-uniform;
* `simple_speaker_listener` (a speaker, Discrete(3) messages, and a listener, Discrete(5)
  moves; two modules `speaker` and `listener` with different spaces);
* `simple_speaker_listener_continuous` (the same with `continuous_actions=True`: the message
  Box(0, 1, (3,)), the listener's forces Box(0, 1, (5,)); noise as for spread).

Every agent step records the behaviour's exact `action_logp` (see
`acting.multi_agent_experts`), so off-policy evaluation can weight by it. The team return of
an episode is the sum of every agent's rewards over its 25 steps. `dataset.json` beside the
Parquet files holds the recipe, the size, the data's team return and two references measured
here on the same env seeds whatever the data seed (env seeds `REF_SEED ...`): `ref_min_score`
(uniform random) and `ref_max_score` (the heuristic, epsilon 0), for `normalized_score`.

This module is what the sets are (it loads no JAX, so `rljax-offline datasets list` is quick);
`apps.multi_agent_record` makes them.

Example:
    >>> from rljax_offline.apps.multi_agent_record import make_multi_agent_dataset
    >>> meta = make_multi_agent_dataset("mpe-simple_spread-heuristic-eps0.1", "/tmp/spread",
    ...                                 num_steps=250, eval_episodes=10)   # a tiny set
    >>> meta["agent_to_module"]
    {'agent_0': 'spread', 'agent_1': 'spread', 'agent_2': 'spread'}
"""

from __future__ import annotations

from typing import NamedTuple

from rljax_offline.errors import UsageError

RECIPE_VERSION = 1
DEFAULT_NUM_STEPS = 200_000    # env steps (8,000 episodes of 25 steps)
DEFAULT_EVAL_EPISODES = 300    # episodes behind each reference return (standard error ~0.6)
REF_SEED = 1_000_000           # env seeds of the reference returns: REF_SEED + episode
EPSILONS = (0.0, 0.1, 0.3, 0.5, 0.7, 1.0)
NOISE_SIGMA = 0.1              # the continuous heuristic's Gaussian noise (before truncation)


class MultiAgentEnv(NamedTuple):
    """One mpe2 env as the recipes make it."""

    module: str              # mpe2's module, e.g. "simple_spread_v3"
    kwargs: tuple            # keyword arguments of its parallel_env, as (name, value) pairs
    agent_to_module: tuple   # (agent id, module id) pairs
    doc: str

    @property
    def env_id(self) -> str:
        return f"mpe2.{self.module}"

    @property
    def continuous(self) -> bool:
        return bool(dict(self.kwargs).get("continuous_actions", False))


ENVS: dict[str, MultiAgentEnv] = {
    "simple_spread": MultiAgentEnv(
        "simple_spread_v3", (("N", 3), ("max_cycles", 25), ("continuous_actions", False)),
        tuple((f"agent_{i}", "spread") for i in range(3)),
        "3 agents cover 3 landmarks, Discrete(5) moves, one shared module"),
    "simple_spread_continuous": MultiAgentEnv(
        "simple_spread_v3", (("N", 3), ("max_cycles", 25), ("continuous_actions", True)),
        tuple((f"agent_{i}", "spread") for i in range(3)),
        "3 agents cover 3 landmarks, Box(0, 1, (5,)) forces, one shared module"),
    "simple_speaker_listener": MultiAgentEnv(
        "simple_speaker_listener_v4", (("max_cycles", 25), ("continuous_actions", False)),
        (("speaker_0", "speaker"), ("listener_0", "listener")),
        "a speaker names the goal landmark (Discrete(3)), a listener moves (Discrete(5)); "
        "two modules"),
    "simple_speaker_listener_continuous": MultiAgentEnv(
        "simple_speaker_listener_v4", (("max_cycles", 25), ("continuous_actions", True)),
        (("speaker_0", "speaker"), ("listener_0", "listener")),
        "a speaker's message Box(0, 1, (3,)), a listener's forces Box(0, 1, (5,)); "
        "two modules"),
}


class MultiAgentRecipe(NamedTuple):
    """One multi-agent data set: env, behaviour, what it is.

    Attributes:
      name: the data set's name.
      env: the env's short name (`ENVS`).
      epsilon: the scripted heuristic's epsilon (None for the IPPO sets).
      doc: what the behaviour is, in words.
      kind: "heuristic", or the IPPO set's kind (`IPPO_KINDS`).
    """

    name: str
    env: str
    epsilon: float | None
    doc: str
    kind: str = "heuristic"

    @property
    def spec(self) -> MultiAgentEnv:
        return ENVS[self.env]


def _doc(env: str, eps: float) -> str:
    spec = ENVS[env]
    if eps == 1.0:
        what = "uniform random actions"
    elif eps == 0.0:
        what = "the scripted heuristic" + (f" with noise sigma {NOISE_SIGMA}"
                                           if spec.continuous else "")
    else:
        what = (f"the scripted heuristic{' with noise' if spec.continuous else ''}, a uniform "
                f"action with probability {eps}")
    return f"{spec.env_id} ({spec.doc}): {what}"


RECIPES: dict[str, MultiAgentRecipe] = {
    f"mpe-{env}-heuristic-eps{eps}": MultiAgentRecipe(f"mpe-{env}-heuristic-eps{eps}", env, eps,
                                                      _doc(env, eps))
    for env in ENVS for eps in EPSILONS}

# D4RL's kinds, from one IPPO run per env (`apps.multi_agent_ippo`): one module every agent
# shares (simple_spread) or one per kind of agent (speaker-listener's two); Box actions with
# PPO's `normalize_actions` (with the plain Gaussian on mpe2's [0, 1] box continuous
# simple_spread did not learn in 400k env steps: expert -74.1 against random -76.5).
IPPO_KINDS = ("random", "medium", "medium-replay", "expert")
IPPO_ENVS = ("simple_spread", "simple_spread_continuous", "simple_speaker_listener",
             "simple_speaker_listener_continuous")
# checkpoints in the first 1/20 of the run (one elsewhere): speaker-listener's IPPO is past
# the halfway return by its first regular checkpoint (20,000 env steps)
IPPO_DENSE_FIRST = {"simple_speaker_listener": 10, "simple_speaker_listener_continuous": 10}
DEFAULT_IPPO_ENV_STEPS = 400_000   # IPPO reaches normalised 60 on simple_spread by ~300k
_IPPO_DOCS = {
    "random": "uniform random actions",
    "medium": "IPPO's sampling policy at the checkpoint nearest half of the way from random "
              "to expert",
    "medium-replay": "IPPO's rollouts up to the medium checkpoint",
    "expert": "IPPO's sampling policy at its best checkpoint",
}
RECIPES.update({
    f"mpe-{env}-ippo-{kind}": MultiAgentRecipe(
        f"mpe-{env}-ippo-{kind}", env, None,
        f"{ENVS[env].env_id} ({ENVS[env].doc}): {_IPPO_DOCS[kind]}", kind)
    for env in IPPO_ENVS for kind in IPPO_KINDS})


def recipe(name: str) -> MultiAgentRecipe:
    """The recipe called `name`; a one-line error listing the known ones.

    Args:
      name: a recipe name (`RECIPES`).
    """
    try:
        return RECIPES[name]
    except KeyError:
        raise UsageError(f"unknown multi-agent data set {name!r}; known: "
                         f"{', '.join(sorted(RECIPES))}") from None
