"""Making the multi-agent data sets of `apps.multi_agent_datasets`: the scripted behaviour
policies (`acting.multi_agent_experts`) record whole episodes through `MultiAgentEnvRunner` to
the multi-agent Parquet format (`agents/` and `env/` folders, `data.multi_agent_io`), and
`dataset.json` goes beside them (the recipe, the sizes, the data's team return, the random and
heuristic references measured here).

Example:
    >>> meta = make_multi_agent_dataset("mpe-simple_spread-heuristic-eps0.3", "/tmp/spread",
    ...                                 num_steps=100, eval_episodes=4)
    >>> meta["num_episodes"], meta["module_ids"]
    (4, ['spread'])
    >>> from rljax_offline.data.multi_agent_io import read_multi_agent_episodes
    >>> len(read_multi_agent_episodes("/tmp/spread"))
    4
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import itertools
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import rljax_offline
from rljax_offline.acting.multi_agent_experts import (
    EpsilonScripted,
    NoisyScripted,
    listener_heuristic,
    listener_heuristic_continuous,
    speaker_heuristic,
    speaker_heuristic_continuous,
    spread_heuristic,
    spread_heuristic_continuous,
)
from rljax_offline.acting.multi_agent_runner import MultiAgentEnvRunner
from rljax_offline.apps.mujoco_datasets import META_FILE, normalized_score
from rljax_offline.apps.mujoco_policies import write_json
from rljax_offline.apps.multi_agent_datasets import (
    DEFAULT_EVAL_EPISODES,
    DEFAULT_IPPO_ENV_STEPS,
    DEFAULT_NUM_STEPS,
    ENVS,
    NOISE_SIGMA,
    RECIPE_VERSION,
    REF_SEED,
    MultiAgentEnv,
    MultiAgentRecipe,
    recipe,
)
from rljax_offline.apps.multi_agent_ippo import ippo_run, module_policies
from rljax_offline.apps.provenance import made_with
from rljax_offline.data.multi_agent_io import MultiAgentEpisodeWriter, iter_multi_agent_episodes
from rljax_offline.errors import OutputExistsError, UsageError

__all__ = ["behavior_policies", "default_cache_dir", "env_maker", "make_multi_agent_dataset",
           "team_returns"]


def default_cache_dir() -> str:
    """`$RLJAX_MULTI_AGENT_CACHE`, else `~/.cache/rljax_offline/multi_agent`: where the IPPO
    runs behind the `mpe-ENV-ippo-KIND` sets are kept."""
    return os.environ.get("RLJAX_MULTI_AGENT_CACHE",
                          os.path.join(os.path.expanduser("~"), ".cache", "rljax_offline",
                                       "multi_agent"))

# the scripted policy of each module: (for Discrete actions, for Box actions)
_SCRIPTED = {
    ("simple_spread_v3", "spread"): (spread_heuristic, spread_heuristic_continuous),
    ("simple_speaker_listener_v4", "speaker"): (speaker_heuristic, speaker_heuristic_continuous),
    ("simple_speaker_listener_v4", "listener"): (listener_heuristic,
                                                 listener_heuristic_continuous),
}


def env_maker(env: str) -> Callable[[], Any]:
    """`() -> env`: a new mpe2 parallel env of `apps.multi_agent_datasets.ENVS[env]`.

    Args:
      env: the env's short name ("simple_spread", "simple_spread_continuous",
        "simple_speaker_listener").
    """
    spec = _env_spec(env)
    if importlib.util.find_spec("mpe2") is None:
        raise UsageError(f"{env} needs mpe2: pip install \"rljax-offline[multiagent]\"")
    module = importlib.import_module(f"mpe2.{spec.module}")
    kwargs = dict(spec.kwargs)
    return lambda: module.parallel_env(**kwargs)


def _env_spec(env: str) -> MultiAgentEnv:
    try:
        return ENVS[env]
    except KeyError:
        raise UsageError(f"unknown multi-agent env {env!r}; known: {', '.join(ENVS)}") from None


def behavior_policies(env: str, epsilon: float, *, sigma: float = NOISE_SIGMA) -> dict:
    """`{module_id: policy}` of env's scripted heuristic with epsilon-uniform actions (and, for
    continuous actions, truncated Gaussian noise `sigma`), each recording `action_logp`.

    Args:
      env: the env's short name (`apps.multi_agent_datasets.ENVS`).
      epsilon: the probability of a uniform action, per agent and step (1.0: uniform random).
      sigma: the continuous heuristic's noise (standard deviation before truncation).
    """
    return dict(_cached_policies(env, float(epsilon), float(sigma)))


@functools.lru_cache(maxsize=64)
def _cached_policies(env: str, epsilon: float, sigma: float) -> tuple:
    """The policies are pure (their draws come from the runner's keys): one compile each per
    process, however many data sets and references it makes."""
    spec = _env_spec(env)
    probe = env_maker(env)()
    agent_to_module = dict(spec.agent_to_module)
    policies = {}
    for agent, module in agent_to_module.items():
        if module in policies:
            continue
        discrete, box = _SCRIPTED[(spec.module, module)]
        space = probe.action_space(agent)
        if spec.continuous:
            policies[module] = NoisyScripted(box, space.low, space.high, epsilon, sigma)
        else:
            policies[module] = EpsilonScripted(discrete, int(space.n), epsilon)
    probe.close()
    return tuple(policies.items())


def team_returns(env: str, epsilon: float, num_episodes: int, *, seed: int,
                 num_envs: int = 8) -> np.ndarray:
    """Team returns (every agent's rewards summed over the episode) of the behaviour
    `behavior_policies(env, epsilon)` on env seeds `seed, seed + 1, ...`, `[num_episodes]`.

    Args:
      env: the env's short name (`apps.multi_agent_datasets.ENVS`).
      epsilon: the behaviour's epsilon (1.0: uniform random, 0.0: the heuristic).
      num_episodes: how many episodes.
      seed: the first env seed and the policies' RNG seed.
      num_envs: env copies stepped together.
    """
    runner = _runner(env, epsilon, seed, num_envs)
    return np.asarray([ep.get_return() for ep in runner.episodes(num_episodes)], np.float64)


def _runner(env: str, epsilon: float, seed: int, num_envs: int) -> MultiAgentEnvRunner:
    spec = _env_spec(env)
    return MultiAgentEnvRunner(env_maker(env), behavior_policies(env, epsilon),
                               agent_to_module_mapping_fn=dict(spec.agent_to_module),
                               num_envs=num_envs, seed=seed)


def _named(episodes: Iterator, prefix: str) -> Iterator:
    """The episodes with ids `{prefix}-{k:06d}` (agent episodes `...-{agent}`) in place of
    the runner's random uuids, so the same seed writes the same data, ids included."""
    for k, ep in enumerate(episodes):
        ma_id = f"{prefix}-{k:06d}"
        yield ep.replace(id_=ma_id, agent_episodes={
            a: e.replace(id_=f"{ma_id}-{a}", multi_agent_episode_id=ma_id)
            for a, e in ep.agent_episodes.items()})


def _summary(returns: np.ndarray) -> dict:
    return {"mean": float(np.mean(returns)), "std": float(np.std(returns)),
            "min": float(np.min(returns)), "max": float(np.max(returns))}


def _references(r: MultiAgentRecipe, eval_episodes: int, num_envs: int, run: Any) -> dict:
    """The normalization constants, measured here on env seeds `REF_SEED ...`: uniform
    random (min) and the heuristic or the IPPO run's expert (max)."""
    if run is None:
        low, high = (team_returns(r.env, eps, eval_episodes, seed=REF_SEED, num_envs=num_envs)
                     for eps in (1.0, 0.0))
        return {"ref_min_score": float(np.mean(low)), "ref_max_score": float(np.mean(high)),
                "ref_random_return": _summary(low), "ref_heuristic_return": _summary(high),
                "ref_scores": f"team returns over {eval_episodes} episodes on env seeds "
                              f"{REF_SEED}..{REF_SEED + eval_episodes - 1} measured here: "
                              "uniform random (min) and the heuristic with epsilon 0 (max)"}
    return {"ref_min_score": run.random_return, "ref_max_score": run.expert["return_mean"],
            "ippo_run": {"path": run.path, "env_steps": run.env_steps, "seed": run.seed,
                         "medium": run.medium, "expert": run.expert,
                         "evaluations": run.evaluations},
            "ref_scores": f"team returns over {run.eval_episodes} episodes on env seeds "
                          f"{REF_SEED}.. measured here: uniform random (min) and IPPO's "
                          "expert checkpoint, sampling (max)"}


def _episodes(r: MultiAgentRecipe, run: Any, num_episodes: int, seed: int,
              num_envs: int) -> Iterator:
    """The recipe's episodes: its behaviour's, or IPPO's rollouts for medium-replay."""
    if r.kind == "medium-replay":
        return itertools.islice(iter_multi_agent_episodes(run.replay()),
                                run.replay_episodes_before("medium"))
    if r.kind in ("medium", "expert"):
        runner = MultiAgentEnvRunner(env_maker(r.env),
                                     module_policies(getattr(run, r.kind)["checkpoint"]),
                                     agent_to_module_mapping_fn=dict(r.spec.agent_to_module),
                                     num_envs=num_envs, seed=seed)
        return runner.episodes(num_episodes)
    epsilon = 1.0 if r.kind == "random" else r.epsilon
    return _runner(r.env, epsilon, seed, num_envs).episodes(num_episodes)


def _ippo_run(r: MultiAgentRecipe, env_steps: int | None, seed: int, cache_dir: str | None,
              eval_episodes: int, num_envs: int, log: Any) -> Any:
    """The recipe's cached IPPO run (None for the heuristic sets)."""
    if r.kind == "heuristic":
        return None
    return ippo_run(r.env, env_maker(r.env), env_steps=env_steps or DEFAULT_IPPO_ENV_STEPS,
                    seed=seed, cache_dir=cache_dir or default_cache_dir(),
                    eval_episodes=eval_episodes, log=log,
                    random_returns=lambda n, s: team_returns(r.env, 1.0, n, seed=s,
                                                             num_envs=num_envs))


def make_multi_agent_dataset(name: str, output: str, *, num_steps: int = DEFAULT_NUM_STEPS,
                             seed: int = 0, num_envs: int = 8,
                             eval_episodes: int = DEFAULT_EVAL_EPISODES,
                             env_steps: int | None = None, cache_dir: str | None = None,
                             max_episodes_per_file: int | None = 2000,
                             progress: bool = False, log: Any = None) -> dict:
    """Makes the multi-agent data set `name` (`apps.multi_agent_datasets.RECIPES`) in the new
    folder `output` and returns its `dataset.json` contents.

    Episodes are whole (25 env steps each in every recipe); their count is
    `ceil(num_steps / 25)` (medium-replay: IPPO's rollouts up to the medium checkpoint
    instead). Env seeds are `seed, seed + 1, ...`, the policies' draws come from
    `seed`: the same seed and `num_envs` give the same data (episode ids `{name}-s{seed}-{k}`
    included; the Parquet file names carry the time of the run). The IPPO sets train (or take
    from the cache) one IPPO run per env, seed and budget (`apps.multi_agent_ippo`).

    Args:
      name: the data set (`apps.multi_agent_datasets.RECIPES`, e.g.
        "mpe-simple_spread-heuristic-eps0.1", "mpe-simple_spread-ippo-medium").
      output: the new (or empty) folder to write.
      num_steps: the size in env steps (each env step is one step of every agent).
      seed: seeds the env resets and the behaviour's draws (and the IPPO run).
      num_envs: env copies stepped together.
      eval_episodes: episodes behind each reference return (random and heuristic or
        expert, on env seeds `REF_SEED ...` whatever `seed`).
      env_steps: the IPPO run's budget (IPPO sets; default `DEFAULT_IPPO_ENV_STEPS`).
      cache_dir: where IPPO runs are cached (default `$RLJAX_MULTI_AGENT_CACHE` or
        `~/.cache/rljax_offline/multi_agent`).
      max_episodes_per_file: multi-agent episodes per Parquet file pair.
      progress: show a progress bar on stderr.
      log: a callable given progress lines (None: silent).
    """
    r = recipe(name)
    spec, output = r.spec, os.fspath(output)
    if num_steps < 1 or eval_episodes < 1:
        raise UsageError(f"num_steps and eval_episodes must be >= 1, got {num_steps} and "
                         f"{eval_episodes}")
    if (env_steps is not None or cache_dir is not None) and r.kind == "heuristic":
        raise UsageError(f"env_steps and cache_dir: the IPPO sets only ({name} is made from "
                         "a scripted policy)")
    if os.path.exists(output) and (not os.path.isdir(output) or os.listdir(output)):
        raise OutputExistsError(f"--output {output!r} exists and is not an empty folder: a "
                                "data set is made into a new folder")
    log = log or (lambda message: None)
    probe = env_maker(r.env)()
    max_cycles = int(dict(spec.kwargs)["max_cycles"])
    num_episodes = -(-num_steps // max_cycles)
    run = _ippo_run(r, env_steps, seed, cache_dir, eval_episodes, num_envs, log)
    log(f"{name}: the references ({eval_episodes} episodes each)")
    refs = _references(r, eval_episodes, num_envs, run)
    log(f"{name}: recording")
    t0 = time.perf_counter()
    returns, agent_steps, env_steps_recorded, truncated = [], 0, 0, 0
    from tqdm import tqdm

    total = run.replay_episodes_before("medium") if r.kind == "medium-replay" else num_episodes
    bar = tqdm(total=total, desc=name, unit="ep", disable=not progress, leave=False)
    with MultiAgentEpisodeWriter(output, max_episodes_per_file=max_episodes_per_file) as w:
        for ep in _named(_episodes(r, run, num_episodes, seed, num_envs), f"{name}-s{seed}"):
            w.write(ep)
            returns.append(ep.get_return())
            agent_steps += ep.agent_steps()
            env_steps_recorded += ep.env_steps()
            truncated += bool(ep.is_truncated)
            bar.update(1)
    bar.close()
    files = w.close()
    returns = np.asarray(returns, np.float64)
    data = _summary(returns)
    agent_to_module = dict(spec.agent_to_module)
    meta = {
        "name": name, "env_id": spec.env_id, "env_kwargs": dict(spec.kwargs),
        "kind": r.kind, "epsilon": r.epsilon, "seed": seed, "num_envs": num_envs,
        "behavior": r.doc,
        "noise_sigma": NOISE_SIGMA if spec.continuous and r.kind == "heuristic" else None,
        "agent_ids": list(agent_to_module), "module_ids": sorted(set(agent_to_module.values())),
        "agent_to_module": agent_to_module,
        "observation_spaces": {a: str(probe.observation_space(a)) for a in agent_to_module},
        "action_spaces": {a: str(probe.action_space(a)) for a in agent_to_module},
        "num_episodes": len(returns), "num_steps": env_steps_recorded,
        "num_agent_steps": agent_steps, "num_truncated": truncated,
        "env_seeds": ([seed, seed + len(returns) - 1] if r.kind != "medium-replay"
                      else "IPPO's rollouts"),
        "return_mean": data["mean"], "return_std": data["std"], "return_min": data["min"],
        "return_max": data["max"], **refs,
        "return": "team return: every agent's rewards summed over the episode",
        "action_logp": _ACTION_LOGP[(r.kind == "heuristic", spec.continuous)],
        "recipe_version": RECIPE_VERSION,
        "made_by": f"rljax_offline {rljax_offline.__version__}", "made_with": made_with(),
        "files": [os.path.relpath(f, output) if os.path.isabs(f) else f for f in files],
        "seconds_recording": round(time.perf_counter() - t0, 1),
    }
    probe.close()
    meta["normalized_return_mean"] = float(normalized_score(meta["return_mean"], meta))
    write_json(os.path.join(output, META_FILE), meta)
    log(f"{name}: {len(returns)} episodes, team return {data['mean']:.1f} +- {data['std']:.1f} "
        f"(random {meta['ref_min_score']:.1f}, max {meta['ref_max_score']:.1f})")
    return meta


# how `action_logp` was recorded: (a scripted set, continuous actions) -> words
_ACTION_LOGP = {
    (True, False): "log of epsilon / n + (1 - epsilon) [a == heuristic]",
    (True, True): "log of epsilon / box volume + (1 - epsilon) truncated Gaussian density "
                  "(mean the heuristic's action, sigma noise_sigma)",
    (False, False): "the behaviour's log-probability (IPPO's categorical; random: log 1/n)",
    (False, True): "the behaviour's log-probability (IPPO's clipped Gaussian: its density "
                   "inside the box, its mass beyond a bound on it; random: the uniform's "
                   "log-density)",
}
