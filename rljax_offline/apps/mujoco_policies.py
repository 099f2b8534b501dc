"""The behaviour policies of the MuJoCo data sets: one online SAC run per env, cached.

D4RL made its Hopper, HalfCheetah and Walker2d sets from SAC runs: `expert` from a policy
trained to completion, `medium` from one stopped at about a third of the expert's return,
`medium-replay` from the learner's replay buffer up to that point. `behavior_run` does the
same here, once per (env, seed, env-step budget): it trains SAC, saving a checkpoint and
evaluating it (sampled actions, the behaviour that records the data) every
`env_steps / num_checkpoints` env steps, with every episode the learner sampled written to
Parquet (`offline_data(output=...)`: the replay buffer). The checkpoint with the best
evaluation is the expert, the one whose evaluation is closest to a third of the expert's is
the medium policy. The normalization constants are measured here: the mean return of the
uniform random policy and of the expert, over `eval_episodes` episodes each (the first
episode of each of that many envs, so short episodes are not over-counted).

The cache folder holds `behavior.json` (written last: a folder without it is an interrupted
run and is trained again), `checkpoints/<env steps>/` and `replay/`. A seed gives the same run
only with the same libraries on the same kind of CPU (SAC amplifies float rounding), so
`behavior.json` records what made it (`made_with`, `apps.provenance`).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from rljax_offline.acting.env_runner import make_vector_env
from rljax_offline.acting.protocol import as_actor
from rljax_offline.algorithms.algorithm import Algorithm
from rljax_offline.algorithms.sac import SACConfig
from rljax_offline.apps.provenance import made_with
from rljax_offline.apps.training_loop import checkpointed_steps

POLICY_VERSION = 1  # bump when the SAC recipe changes: runs of other versions are kept apart
MEDIUM_FRACTION = 1 / 3


@dataclass(frozen=True)
class BehaviorRun:
    """A finished, cached SAC run: where its pieces are and what was measured."""

    env_id: str
    seed: int
    env_steps: int
    path: str
    # {"env_steps", "return_mean", "checkpoint", "replay_files"} at each checkpoint
    evaluations: list = field(default_factory=list)
    expert: dict = field(default_factory=dict)       # {"env_steps", "checkpoint", "return_mean"}
    medium: dict = field(default_factory=dict)
    random_return: float = 0.0    # ref_min_score: the uniform random policy's mean return
    expert_return: float = 0.0    # ref_max_score: the expert's mean return (sampled actions)
    eval_episodes: int = 0
    notes: list = field(default_factory=list)
    made_with: dict = field(default_factory=dict)  # `apps.provenance.made_with()` of the run

    def replay_files(self, which: str) -> list[str]:
        """The files of the learner's episodes (`offline_data(output=...)`) finished before
        the `"medium"` or `"expert"` checkpoint."""
        return [os.path.join(self.path, "replay", f) for f in getattr(self, which)["replay_files"]]

    def actor(self, which: str):
        """The sampling actor (`explore=True`) of the `"medium"` or `"expert"` checkpoint."""
        algo = Algorithm.from_checkpoint(getattr(self, which)["checkpoint"])
        try:  # the actor holds its own copy of the params: the algorithm's envs can close
            return algo.actor(explore=True)
        finally:
            algo.stop()


def default_cache_dir() -> str:
    """`$RLJAX_MUJOCO_CACHE`, else `~/.cache/rljax_offline/mujoco`."""
    return os.environ.get("RLJAX_MUJOCO_CACHE",
                          os.path.join(os.path.expanduser("~"), ".cache", "rljax_offline",
                                       "mujoco"))


def uniform_policy(action_space: gym.spaces.Box, seed: int):
    """The random behaviour: uniform actions in the Box, `obs [N, ...] -> (actions, extras)`.

    Records `action_logp = -sum(log(high - low))` (the uniform density, exact) and
    `action_dist_inputs = concat(low, high)` (the uniform's parameters, as wide as the
    Gaussian's `concat(mean, log_std)`)."""
    low = np.asarray(action_space.low, np.float32).reshape(-1)
    high = np.asarray(action_space.high, np.float32).reshape(-1)
    logp = np.float32(-np.sum(np.log(high.astype(np.float64) - low)))
    inputs = np.concatenate([low, high]).astype(np.float32)
    rng = np.random.default_rng(seed)

    def act(obs):
        n = len(obs)
        actions = rng.uniform(low, high, (n, low.size)).astype(action_space.dtype)
        return (actions.reshape((n,) + action_space.shape),
                {"action_logp": np.full(n, logp, np.float32),
                 "action_dist_inputs": np.broadcast_to(inputs, (n, inputs.size)).copy()})

    return act


def first_episode_returns(env_id: str, actor: Any, num_episodes: int, seed: int) -> np.ndarray:
    """The return of the first episode of each of `num_episodes` envs (reset seeds
    `seed, seed + 1, ...`): an unbiased mean, where counting the first N episodes to finish
    over fewer envs favours the short ones. `actor` is an `acting.protocol` actor or a
    callable `obs -> actions` / `(actions, extras)`."""
    actor = as_actor(actor)
    venv = make_vector_env(env_id, num_episodes)
    space = venv.single_action_space
    try:
        obs, _ = venv.reset(seed=seed)
        actor.reset(obs, seed)
        returns = np.zeros(num_episodes)
        done = np.zeros(num_episodes, bool)
        fresh = np.zeros(num_episodes, bool)
        while not done.all():
            actions, _ = actor.select()
            actions = np.asarray(actions).reshape((num_episodes,) + space.shape)
            obs, rew, term, trunc, _ = venv.step(actions.astype(space.dtype))
            returns += np.where(done | fresh, 0.0, rew)
            ended = (term | trunc) & ~fresh
            actor.observe(rew, obs, fresh)
            fresh = ended
            done |= ended
        return returns
    finally:
        venv.close()


def cached_run(path: str, meta: str) -> dict | None:
    """The finished run cached in the folder `path` (its `meta` JSON, written last), or None
    with `path` made new and empty (a folder without `meta` is an interrupted run: ours to
    remove).

    Args:
      path: the run's cache folder.
      meta: the JSON file a finished run writes last, inside `path`.
    """
    if os.path.isfile(meta):
        with open(meta) as f:
            return json.load(f)
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)
    return None


def write_json(path: str, obj: Any) -> None:
    """`obj` as indented JSON at `path`, atomically (a temp file renamed over it)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def run_dir(env_id: str, seed: int, env_steps: int, cache_dir: str | None = None) -> str:
    """The cache folder of one SAC run (its recipe version in the name)."""
    return os.path.join(cache_dir or default_cache_dir(),
                        f"{env_id}-sac-seed{seed}-steps{env_steps}-v{POLICY_VERSION}")


def sac_config(env_id: str, seed: int, output: str) -> SACConfig:
    """The SAC that makes the behaviour policies: RLlib's SAC defaults but the paper's
    learning rates pinned (3e-4 for actor, critics and alpha, as the Hopper sets here were
    made; RLlib's new stack defaults the actor to 3e-5, which learns Hopper far slower in a
    CPU-sized budget), one env, every sampled episode written to `output` with its
    `action_logp` and `action_dist_inputs`."""
    return (SACConfig().environment(env_id).debugging(seed=seed)
            .training(actor_lr=3e-4, critic_lr=3e-4, alpha_lr=3e-4)
            .offline_data(output=output))


def behavior_run(env_id: str, *, env_steps: int = 30_000, seed: int = 0,
                 cache_dir: str | None = None, eval_episodes: int = 10,
                 num_checkpoints: int = 10, checkpoint_episodes: int = 5,
                 log: Any = None) -> BehaviorRun:
    """The cached SAC run of `env_id` for this seed and env-step budget, trained first if the
    cache has none (see the module docstring). `log(message)` hears of progress."""
    path = run_dir(env_id, seed, env_steps, cache_dir)
    meta = os.path.join(path, "behavior.json")
    cached = cached_run(path, meta)
    if cached is not None:
        return BehaviorRun(**cached)
    log = log or (lambda message: None)
    evaluations = _train(env_id, seed, env_steps, path, num_checkpoints, checkpoint_episodes,
                         log)
    expert = max(evaluations, key=lambda e: e["return_mean"])
    env = gym.make(env_id)
    random_return = float(first_episode_returns(
        env_id, uniform_policy(env.action_space, seed + 7), eval_episodes, seed + 20_000).mean())
    env.close()
    measured = {"expert": _measure(expert, env_id, eval_episodes, seed + 30_000)}
    target = random_return + MEDIUM_FRACTION * (measured["expert"]["return_mean"] - random_return)
    # Closest to a third of the way from random to expert; the earliest among equals.
    medium = min((e for e in evaluations if e["env_steps"] <= expert["env_steps"]),
                 key=lambda e: (abs(e["return_mean"] - target), e["env_steps"]))
    measured["medium"] = _measure(medium, env_id, eval_episodes, seed + 40_000)
    run = BehaviorRun(env_id=env_id, seed=seed, env_steps=env_steps, path=path,
                      evaluations=evaluations, expert=measured["expert"],
                      medium=measured["medium"], random_return=random_return,
                      expert_return=measured["expert"]["return_mean"],
                      eval_episodes=eval_episodes,
                      notes=_notes(measured, random_return, target), made_with=made_with())
    write_json(meta, asdict(run))
    log(f"{env_id}: random {random_return:.1f}, medium {measured['medium']['return_mean']:.1f} "
        f"at {medium['env_steps']} env steps, expert {run.expert_return:.1f} at "
        f"{expert['env_steps']}")
    return run


def _train(env_id, seed, env_steps, path, num_checkpoints, checkpoint_episodes, log) -> list:
    """Trains SAC for `env_steps` env steps; a checkpoint and an evaluation of its sampling
    policy every `env_steps / num_checkpoints` steps. Returns the evaluations."""
    algo = sac_config(env_id, seed, os.path.join(path, "replay")).build()
    evaluations = []
    try:
        for steps, ckpt in checkpointed_steps(algo, os.path.join(path, "checkpoints"),
                                              env_steps, num_checkpoints):
            # the files now in replay/ hold exactly the episodes finished before this
            # checkpoint (medium-replay's cut)
            replay = sorted(os.path.relpath(f, os.path.join(path, "replay"))
                            for f in algo.output_files)
            ret = float(first_episode_returns(env_id, algo.actor(explore=True),
                                              checkpoint_episodes,
                                              seed + 10_000 + steps).mean())
            evaluations.append({"env_steps": steps, "return_mean": ret,
                                "checkpoint": ckpt, "replay_files": replay})
            log(f"{env_id}: SAC at {steps} env steps, sampled return {ret:.1f}")
    finally:
        algo.stop()
    return evaluations


def _measure(evaluation: dict, env_id: str, num_episodes: int, seed: int) -> dict:
    """The checkpoint's sampling policy, measured over `num_episodes` episodes."""
    algo = Algorithm.from_checkpoint(evaluation["checkpoint"])
    try:
        returns = first_episode_returns(env_id, algo.actor(explore=True), num_episodes, seed)
    finally:
        algo.stop()
    return {**evaluation, "return_mean": float(returns.mean()),
            "return_std": float(returns.std()), "training_return_mean": evaluation["return_mean"]}


def _notes(measured: dict, random_return: float, target: float) -> list:
    """Plain words where the run fell short of D4RL's recipe."""
    expert, medium = measured["expert"], measured["medium"]
    span = expert["return_mean"] - random_return
    notes = []
    if span <= 0:
        notes.append("the expert is no better than the random policy: the SAC budget is too "
                     "small to learn this env (normalized scores are meaningless)")
        return notes
    fraction = (medium["return_mean"] - random_return) / span
    if not 0.2 <= fraction <= 0.5:
        notes.append(f"the medium policy is {fraction:.0%} of the way from random to expert "
                     f"(aim: about a third, {target:.1f}); no checkpoint came closer")
    if medium["env_steps"] == expert["env_steps"]:
        notes.append("medium and expert are the same checkpoint: the run never passed "
                     "through a third of the expert's return")
    return notes
