"""Making the MuJoCo data sets of `apps.mujoco_datasets`: the behaviour policies of the env's
cached SAC run (`apps.mujoco_policies`) record whole episodes to Parquet, and `dataset.json`
goes beside them (the recipe, the sizes, the normalization constants measured here)."""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np

import rljax_offline
from rljax_offline.acting.env_runner import EnvRunner
from rljax_offline.acting.protocol import as_actor
from rljax_offline.apps.mujoco_datasets import (
    D4RL_REF,
    DEFAULT_ENV_STEPS,
    DEFAULT_NUM_STEPS,
    META_FILE,
    RECIPE_VERSION,
    normalized_score,
    recipe,
)
from rljax_offline.apps.mujoco_policies import BehaviorRun, behavior_run, uniform_policy, write_json
from rljax_offline.apps.provenance import made_with
from rljax_offline.data import EpisodeWriter, iter_episodes
from rljax_offline.errors import OutputExistsError, UsageError


class TaggedActor:
    """An actor whose episodes carry `custom_data["behavior"] = tag` (what recorded them)."""

    def __init__(self, actor: Any, tag: str):
        self.actor, self.tag = as_actor(actor), tag

    def reset(self, obs, seed: int) -> None:
        self.actor.reset(obs, seed)

    def select(self):
        return self.actor.select()

    def observe(self, rewards, next_obs, fresh) -> None:
        self.actor.observe(rewards, next_obs, fresh)

    def running(self, num_envs: int) -> bool:
        return self.actor.running(num_envs)

    def custom_data(self, env: int) -> dict:
        return {**self.actor.custom_data(env), "behavior": self.tag}


def whole_episodes(episodes: Iterable, num_steps: int) -> Iterator:
    """Finished episodes of `episodes`, in order, until their steps reach `num_steps` (the
    last one whole, so a data set holds at most one episode's length more)."""
    steps = 0
    for ep in episodes:
        if not ep.is_done:
            continue
        steps += len(ep)
        yield ep
        if steps >= num_steps:
            return


def replay_episodes(files: list[str]) -> Iterator:
    """The learner's finished episodes in `files`."""
    return (ep for ep in iter_episodes(files) if ep.is_done) if files else iter(())


def _parts(kind: str, run: BehaviorRun, num_steps: int, seed: int) -> list[tuple]:
    """(tag, actor or None for the replay, steps, env seed) for each part of a kind."""
    def sac(which):
        return (f"sac-{which}@{getattr(run, which)['env_steps']}", run.actor(which))

    if kind == "random":
        space = gym.make(run.env_id).action_space
        return [("random", uniform_policy(space, seed), num_steps, seed)]
    if kind == "medium-replay":
        return [("sac-learner", None, run.medium["env_steps"], seed)]
    if kind == "medium-expert":
        half = num_steps // 2
        return [(*sac("medium"), half, seed + 1), (*sac("expert"), num_steps - half, seed + 2)]
    return [(*sac(kind), num_steps, seed + (1 if kind == "medium" else 2))]


def make_dataset(name: str, output: str, *, num_steps: int = DEFAULT_NUM_STEPS,
                 env_steps: int = DEFAULT_ENV_STEPS, seed: int = 0, cache_dir: str | None = None,
                 eval_episodes: int = 10, num_envs: int = 8, log: Any = None) -> dict:
    """Makes the data set `name` (`apps.mujoco_datasets.RECIPES`) in the new folder `output`
    and returns its `dataset.json` contents.

    Args:
      name: the data set (`apps.mujoco_datasets.RECIPES`, e.g. "hopper-medium").
      output: the new folder to write.
      num_steps: the size in env steps (whole episodes; `medium-replay` has the learner's
        steps up to the medium checkpoint instead).
      env_steps: the SAC run's budget (the cache holds one run per env, seed and budget).
      seed: seeds SAC and the recordings: same seed, same data.
      eval_episodes: episodes of the random and expert policies behind the normalization
        constants.
      cache_dir: where SAC runs are cached (None: `~/.cache/rljax_offline/mujoco`).
      num_envs: vectorised envs recording together.
      log: a callable given progress lines (None: silent).
    """
    r = recipe(name)
    if importlib.util.find_spec("mujoco") is None:
        raise UsageError(f"{name} needs MuJoCo: pip install \"rljax-offline[mujoco]\" "
                         "(gymnasium[mujoco])")
    if os.path.exists(output) and (not os.path.isdir(output) or os.listdir(output)):
        raise OutputExistsError(f"--output {output!r} exists and is not an empty folder: a "
                                "data set is made into a new folder")
    run = behavior_run(r.env_id, env_steps=env_steps, seed=seed, cache_dir=cache_dir,
                       eval_episodes=eval_episodes, log=log)
    t0 = time.perf_counter()
    returns, lengths, terminated, behaviors = [], [], 0, {}
    with EpisodeWriter(output, file_prefix=name) as writer:
        for tag, actor, steps, env_seed in _parts(r.kind, run, num_steps, seed):
            if actor is None:
                episodes = replay_episodes(run.replay_files("medium"))
            else:
                runner = EnvRunner(r.env_id, TaggedActor(actor, tag), num_envs=num_envs,
                                   seed=env_seed)
                episodes = whole_episodes(runner.episodes(num_episodes=1 << 62), steps)
            for ep in episodes:
                writer.write(ep)
                returns.append(ep.get_return())
                lengths.append(len(ep))
                terminated += ep.is_terminated
                behaviors[tag] = behaviors.get(tag, 0) + 1
            if actor is not None:
                runner.close()
    files = writer.close()
    short = name.split("-", 1)[0]
    meta = {
        "name": name, "env_id": r.env_id, "kind": r.kind, "seed": seed,
        "num_episodes": len(returns), "num_steps": int(np.sum(lengths)),
        "num_terminated": int(terminated), "num_truncated": len(returns) - int(terminated),
        "return_mean": float(np.mean(returns)), "return_min": float(np.min(returns)),
        "return_max": float(np.max(returns)),
        "ref_min_score": run.random_return, "ref_max_score": run.expert_return,
        "ref_scores": f"mean returns over {run.eval_episodes} episodes measured here: the "
                      "uniform random policy (min) and the expert checkpoint, sampled (max)",
        "d4rl_ref_min_score": D4RL_REF[short][0], "d4rl_ref_max_score": D4RL_REF[short][1],
        "behavior": r.doc, "episodes_by_behavior": behaviors,
        "action_dist": "uniform" if r.kind == "random" else "squashed_gaussian",
        "sac": {"env_steps": run.env_steps, "seed": run.seed,
                "medium": {k: run.medium[k] for k in ("env_steps", "return_mean")},
                "expert": {k: run.expert[k] for k in ("env_steps", "return_mean")},
                "evaluations": [{k: e[k] for k in ("env_steps", "return_mean")}
                                for e in run.evaluations],
                "made_with": run.made_with},
        "notes": list(run.notes), "recipe_version": RECIPE_VERSION,
        "made_by": f"rljax_offline {rljax_offline.__version__}", "made_with": made_with(),
        "files": [os.path.basename(f) for f in files],
        "seconds_recording": round(time.perf_counter() - t0, 1),
    }
    if run.expert_return > run.random_return:
        meta["normalized_return_mean"] = float(normalized_score(meta["return_mean"], meta))
    write_json(os.path.join(output, META_FILE), meta)
    return meta
