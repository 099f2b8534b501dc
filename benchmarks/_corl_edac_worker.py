"""CORL's EDAC, its single file (`algorithms/offline/edac.py` of github.com/corl-team/CORL) run
as it is, on our episodes: the reference side of `edac_vs_ensembles.py --corl-file`.

CORL's `train()` reads D4RL and logs to wandb; neither installs here, so this worker loads the
file with those imports stubbed (and `gym` answered by gymnasium where the old package is
missing: the file names it in signatures only, outside what runs here), then builds CORL's
`Actor`, `VectorizedCritic`, `EDAC` and `ReplayBuffer` the way its `train()` does, with its
`TrainConfig` for every setting not given, and calls `EDAC.update` on its own sampled batches.
What this file adds: the data (the `.npz` the driver wrote, in D4RL's `qlearning_dataset`
names) and the evaluations, the same as d3rlpy's worker: `--evals` equal parts, each timed
apart from its evaluation, then the greedy policy (`tanh(mu)`, CORL's `act` in eval mode) on
`_paired_eval`'s episodes. Prints a progress line (`[corl] ...`) on stderr after each
evaluation and one JSON line on stdout at the end.

Runs in an interpreter with PyTorch and gymnasium (d3rlpy's will do); never imports
rljax_offline.
"""

import argparse
import importlib.util
import json
import sys
import time
import types

import gymnasium
import numpy as np
import torch
from _paired_eval import paired_returns, parse_settings, print_progress

PROGRESS = "[corl]"  # what starts each progress line on stderr


def load_corl(path: str) -> types.ModuleType:
    """CORL's `edac.py` as a module, its train-only imports (D4RL, wandb, pyrallis) stubbed."""
    stubs = {name: types.ModuleType(name) for name in ("d4rl", "wandb", "pyrallis")}
    stubs["pyrallis"].wrap = lambda *args, **kwargs: (lambda fn: fn)
    for name, module in stubs.items():
        sys.modules.setdefault(name, module)
    try:
        import gym  # noqa: F401
    except ImportError:
        sys.modules["gym"] = gymnasium
    spec = importlib.util.spec_from_file_location("corl_edac", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(corl: types.ModuleType, config, state_dim: int, action_dim: int):
    """Actor, critic ensemble and trainer, as CORL's `train()` makes them."""
    actor = corl.Actor(state_dim, action_dim, config.hidden_dim, config.max_action)
    critic = corl.VectorizedCritic(state_dim, action_dim, config.hidden_dim,
                                   config.num_critics)
    actor.to(config.device)
    critic.to(config.device)
    return actor, corl.EDAC(
        actor=actor,
        actor_optimizer=torch.optim.Adam(actor.parameters(), lr=config.actor_learning_rate),
        critic=critic,
        critic_optimizer=torch.optim.Adam(critic.parameters(), lr=config.critic_learning_rate),
        gamma=config.gamma, tau=config.tau, eta=config.eta,
        alpha_learning_rate=config.alpha_learning_rate, device=config.device)


def symmetric_bound(env_id: str) -> float:
    """The env's action bound `b` of a Box `[-b, b]` in every dimension: CORL's actor acts
    in `max_action * tanh(.)` (1.0 in its D4RL files, whose actions are all in [-1, 1])."""
    space = gymnasium.make(env_id).action_space
    low, high = np.asarray(space.low), np.asarray(space.high)
    if not (np.all(high == high.flat[0]) and np.all(low == -high)):
        raise SystemExit(f"CORL's EDAC acts in a symmetric box [-b, b]; {env_id} has "
                         f"{low} .. {high}")
    return float(high.flat[0])


def greedy(actor, device: str):
    """`obs [1, d] -> action [1, a]`: the actor's `tanh(mu) * max_action`."""
    def act(obs):
        with torch.no_grad():
            action, _ = actor(torch.as_tensor(obs, device=device), deterministic=True)
        return action.cpu().numpy()
    return act


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corl-file", required=True, help="CORL's algorithms/offline/edac.py")
    ap.add_argument("--data", required=True, help="the driver's .npz (with next_observations)")
    ap.add_argument("--env", required=True)
    ap.add_argument("--updates", type=int, required=True)
    ap.add_argument("--evals", type=int, default=10)
    ap.add_argument("--eval-episodes", type=int, default=10)
    ap.add_argument("--final-episodes", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="NAME=JSON",
                    help="a TrainConfig field away from CORL's default (e.g. num_critics=50, "
                         "its hopper-medium-v2 setting)")
    args = ap.parse_args()
    corl = load_corl(args.corl_file)
    settings = {"device": "cpu", **parse_settings(args.set)}
    settings.setdefault("max_action", symmetric_bound(args.env))
    config = corl.TrainConfig(**settings)
    corl.set_seed(args.seed)
    data = np.load(args.data)
    rows, state_dim = data["observations"].shape
    action_dim = data["actions"].shape[1]
    buffer = corl.ReplayBuffer(state_dim, action_dim, rows, config.device)
    buffer.load_d4rl_dataset({key: data[key] for key in (
        "observations", "actions", "rewards", "next_observations", "terminals")})
    actor, trainer = build(corl, config, state_dim, action_dim)
    act = greedy(actor, config.device)
    per_part = max(args.updates // args.evals, 1)
    step_s, returns = [], []
    t0 = time.perf_counter()
    for part in range(args.evals):
        t = time.perf_counter()
        for _ in range(per_part):
            trainer.update(buffer.sample(config.batch_size))
        step_s.append((time.perf_counter() - t) / per_part)
        actor.eval()
        returns.append(float(np.mean(paired_returns(
            args.env, act, args.eval_episodes, base=1000 * (part + 1)))))
        actor.train()
        print_progress(PROGRESS, "EDAC", args.seed, per_part * (part + 1),
                       per_part * args.evals, returns[-1], time.perf_counter() - t0)
    wall = time.perf_counter() - t0
    actor.eval()
    final = paired_returns(args.env, act, args.final_episodes)
    print(json.dumps({
        "library": "CORL edac.py", "algo": "EDAC", "set": args.set,
        "settings": {k: getattr(config, k) for k in (
            "num_critics", "eta", "batch_size", "hidden_dim", "gamma", "tau",
            "actor_learning_rate", "critic_learning_rate", "alpha_learning_rate")},
        "batch_size": config.batch_size, "updates": per_part * args.evals,
        "step_s_per_part": step_s, "wall_s": wall, "returns": returns,
        "final_returns": final}))


if __name__ == "__main__":
    main()
