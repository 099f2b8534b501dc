"""d3rlpy's side of `benchmarks/d3rlpy_compare.py`, run in the interpreter that has d3rlpy.

Reads the transitions the driver wrote (`.npz`), trains one d3rlpy algorithm at its defaults
(Box actions scaled to the env's bounds with `MinMaxActionScaler`, as a fair comparison
needs; TD3+BC's observations standardized by the data set's mean and std, as its paper;
ReBRAC's networks those of its paper, `ENCODERS`),
evaluates in the env after each of `--evals` equal parts of `--updates`, and prints one JSON
line: d3rlpy's own mean per-update time of each part (evaluation excluded; the driver reduces
these and ours the same way) and the returns; with `--final-episodes N`, also the final
policy's returns on `_paired_eval`'s N episodes (the same start states as ours).

This file imports d3rlpy and never rljax_offline (`_paired_eval` imports gymnasium and numpy
only): it may run in another virtual environment.
"""

import argparse
import json
import math
import time

import d3rlpy
import torch
import gymnasium as gym
import numpy as np
from _paired_eval import (paired_returns, paired_returns_in_context, parse_settings,
                          print_progress)

PROGRESS = "[d3rlpy]"  # what starts each progress line on stderr
ALGOS = {
    "DiscreteBC": d3rlpy.algos.DiscreteBCConfig,
    "BC": d3rlpy.algos.BCConfig,
    "DiscreteCQL": d3rlpy.algos.DiscreteCQLConfig,
    "CQL": d3rlpy.algos.CQLConfig,
    "IQL": d3rlpy.algos.IQLConfig,
    "TD3PlusBC": d3rlpy.algos.TD3PlusBCConfig,
    "AWAC": d3rlpy.algos.AWACConfig,
    "CRR": d3rlpy.algos.CRRConfig,
    "ReBRAC": d3rlpy.algos.ReBRACConfig,
    "CalQL": d3rlpy.algos.CalQLConfig,
    "BCQ": d3rlpy.algos.BCQConfig,
    "DiscreteBCQ": d3rlpy.algos.DiscreteBCQConfig,
    "PLAS": d3rlpy.algos.PLASConfig,
    "BEAR": d3rlpy.algos.BEARConfig,
    "DecisionTransformer": d3rlpy.algos.DecisionTransformerConfig,
    "DiscreteDecisionTransformer": d3rlpy.algos.DiscreteDecisionTransformerConfig,
}
# Encoders away from d3rlpy's default 256-256 where the algorithm's paper (and d3rlpy's own
# reproduction script) uses others, so both libraries run the same networks: ReBRAC's three
# layer-normed hidden layers of 256 (ours: `ReBRACConfig`'s default model config).
ENCODERS = {"ReBRAC": {"hidden_units": [256, 256, 256], "use_layer_norm": True}}
# The std of a standard normal truncated at +-2: flax's truncated-normal initializers divide by
# it so the draw keeps the variance they name.
TRUNCATED_NORMAL_STD = 0.87962566103423978
# Algorithms whose paper normalizes observations by the data set's mean and std: d3rlpy's
# standard observation scaler, fitted on the data set, as its TD3+BC reproduction does.
STANDARD_OBSERVATIONS = {"TD3PlusBC"}


def config_objects(kwargs: dict) -> dict:
    """`--set` names that stand for d3rlpy objects, popped from `kwargs` and built:
    `encoder_hidden_units=[W, ...]` (a `VectorEncoderFactory`, as `encoder_factory`) and
    `reward_scale=X` (a `MultiplyRewardScaler`, as `reward_scaler`)."""
    built = {}
    if "encoder_hidden_units" in kwargs:
        built["encoder_factory"] = d3rlpy.models.VectorEncoderFactory(
            hidden_units=kwargs.pop("encoder_hidden_units"))
    if "reward_scale" in kwargs:
        built["reward_scaler"] = d3rlpy.preprocessing.MultiplyRewardScaler(
            kwargs.pop("reward_scale"))
    return built


def align_windows(dataset, size: int) -> None:
    """Makes `dataset` sample the windows the learner of rljax_offline cuts: each episode in
    consecutive `size`-step pieces from its first step (the last one shorter), in place of
    d3rlpy's windows ending at any step. A diagnosis of what the windows do (a swap)."""
    slicer = dataset._trajectory_slicer

    def aligned(episode, end_index, length):
        end = min((end_index // size) * size + size - 1, episode.size() - 1)
        return slicer(episode, end, length)

    dataset._trajectory_slicer = aligned


def build(algo, dataset) -> None:
    """Builds `algo`'s scalers and networks on `dataset` now (as `fit` would first), once."""
    if algo.impl is None:
        d3rlpy.algos.qlearning.base.build_scalers_with_transition_picker(algo, dataset)
        algo.build_with_dataset(dataset)


def flax_draw(algo, dataset) -> None:
    """Builds `algo` and redraws every Linear layer of its networks as flax's `Dense` does
    (kernel: truncated normal, variance 1/fan_in; bias: zeros), targets copied after."""
    build(algo, dataset)

    def redraw(layer):
        if isinstance(layer, torch.nn.Linear):
            std = math.sqrt(1.0 / layer.weight.shape[1]) / TRUNCATED_NORMAL_STD
            with torch.no_grad():
                torch.nn.init.trunc_normal_(layer.weight, std=std, a=-2 * std, b=2 * std)
                layer.bias.zero_()

    modules = algo.impl.modules
    for online, target in (("policy", "targ_policy"), ("q_funcs", "targ_q_funcs"),
                           ("imitator", None)):
        if hasattr(modules, online):
            getattr(modules, online).apply(redraw)
            if target and hasattr(modules, target):
                getattr(modules, target).load_state_dict(getattr(modules, online).state_dict())


TRANSFORMERS = ("DecisionTransformer", "DiscreteDecisionTransformer")


def act_greedily(algo, dataset) -> None:
    """Builds `algo` and makes its `predict` return the policy's mean action, `tanh(mu)`
    (scalers still applied), whatever the algorithm's own acting rule."""
    build(algo, dataset)
    impl = algo.impl
    impl.inner_predict_best_action = lambda x: impl.modules.policy(x).squashed_mu


def progress(args, done: int, mean_return: float, seconds: float) -> None:
    """The progress line after each evaluation, out of the run's whole count of updates."""
    total = max(args.updates // args.evals, 1) * args.evals
    print_progress(PROGRESS, args.algo, args.seed, done, total, mean_return, seconds)


def transformer_wrapper(algo, target_return: float):
    """d3rlpy's stateful acting wrapper, greedy (the comparison's evaluations are greedy;
    d3rlpy's default for Discrete actions samples)."""
    sampler = (d3rlpy.algos.GreedyTransformerActionSampler()
               if algo.get_action_type() == d3rlpy.ActionSpace.DISCRETE else None)
    return algo.as_stateful_wrapper(target_return=target_return, action_sampler=sampler)


def transformer_returns(env_id: str, algo, target_return: float, episodes: int,
                        base: int | None = None) -> list[float]:
    wrapper = transformer_wrapper(algo, target_return)
    kwargs = {} if base is None else {"base": base}
    return paired_returns_in_context(
        env_id, wrapper.reset,
        lambda obs, reward: np.asarray(wrapper.predict(obs[0], reward))[None], episodes,
        **kwargs)


def fit_transformer(algo, dataset, env, args, per_eval: int) -> None:
    """Decision Transformer's fit (no evaluators there): each part fitted, timed, then
    evaluated with its stateful wrapper on `--eval-episodes` episodes."""
    if args.target_return is None:
        raise SystemExit("--target-return is needed for a Decision Transformer")
    step_s, returns = [], []
    t0 = time.perf_counter()
    for part in range(args.evals):
        t = time.perf_counter()
        algo.fit(dataset, n_steps=per_eval, n_steps_per_epoch=per_eval, show_progress=False,
                 save_interval=10**9, with_timestamp=False,
                 logger_adapter=d3rlpy.logging.NoopAdapterFactory())
        step_s.append((time.perf_counter() - t) / per_eval)
        returns.append(float(np.mean(transformer_returns(
            args.env, algo, args.target_return, args.eval_episodes, base=1000 * (part + 1)))))
        progress(args, per_eval * (part + 1), returns[-1], time.perf_counter() - t0)
    wall = time.perf_counter() - t0
    final = transformer_returns(args.env, algo, args.target_return, args.final_episodes)
    print(json.dumps({
        "library": f"d3rlpy {d3rlpy.__version__}", "algo": args.algo, "set": args.set,
        "greedy": args.greedy, "device": args.device,
        "batch_size": algo.config.batch_size, "updates": per_eval * args.evals,
        "step_s_per_part": step_s, "wall_s": wall, "returns": returns,
        "final_returns": final}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--algo", choices=sorted(ALGOS), required=True)
    ap.add_argument("--env", required=True)
    ap.add_argument("--updates", type=int, required=True)
    ap.add_argument("--evals", type=int, default=5)
    ap.add_argument("--eval-episodes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, help="d3rlpy's default when not given")
    ap.add_argument("--final-episodes", type=int, default=0,
                    help="then evaluate the final policy on _paired_eval's episodes")
    ap.add_argument("--init", choices=("torch", "flax"), default="torch",
                    help="flax: every Linear layer drawn as flax's Dense draws (LeCun-normal "
                         "kernel, zero bias), a diagnosis of what the draw does")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=JSON",
                    help="a config field away from d3rlpy's default, for a diagnosis "
                         "(e.g. target_update_interval=1000; `config_objects` names two that "
                         "build objects; aligned_windows=true: `align_windows`); the "
                         "comparison uses none")
    ap.add_argument("--greedy", action="store_true",
                    help="act with the policy's mean, tanh(mu), in evaluations and the final "
                         "one, in place of predict's own rule (CRR: the critic-weighted "
                         "resampling of policy actions): a diagnosis")
    ap.add_argument("--target-return", type=float,
                    help="Decision Transformer: the return it acts towards")
    ap.add_argument("--device", default="cpu:0",
                    help="torch device d3rlpy trains and acts on (e.g. cuda:0)")
    args = ap.parse_args()
    d3rlpy.seed(args.seed)
    data = np.load(args.data)
    env = gym.make(args.env)
    kwargs = {}
    if isinstance(env.action_space, gym.spaces.Box):
        kwargs["action_scaler"] = d3rlpy.preprocessing.MinMaxActionScaler(
            minimum=env.action_space.low, maximum=env.action_space.high)
    if args.algo in STANDARD_OBSERVATIONS:
        kwargs["observation_scaler"] = d3rlpy.preprocessing.StandardObservationScaler()
    if args.batch_size:
        kwargs["batch_size"] = args.batch_size
    if args.algo in ENCODERS:
        for side in ("actor_encoder_factory", "critic_encoder_factory"):
            kwargs[side] = d3rlpy.models.VectorEncoderFactory(**ENCODERS[args.algo])
    kwargs.update(parse_settings(args.set))
    aligned = kwargs.pop("aligned_windows", False)
    kwargs.update(config_objects(kwargs))
    config = ALGOS[args.algo](**kwargs)
    dataset = d3rlpy.dataset.MDPDataset(
        data["observations"], data["actions"], data["rewards"], data["terminals"],
        timeouts=data["timeouts"],
        action_space=(d3rlpy.ActionSpace.DISCRETE
                      if isinstance(env.action_space, gym.spaces.Discrete)
                      else d3rlpy.ActionSpace.CONTINUOUS))
    if aligned:
        align_windows(dataset, config.context_size)
    algo = config.create(device=args.device)
    if args.init == "flax":
        flax_draw(algo, dataset)
    if args.greedy:
        act_greedily(algo, dataset)
    per_eval = max(args.updates // args.evals, 1)
    if args.algo in TRANSFORMERS:
        return fit_transformer(algo, dataset, env, args, per_eval)
    t0 = time.perf_counter()
    history = []
    for epoch, metrics in algo.fitter(
            dataset, n_steps=per_eval * args.evals, n_steps_per_epoch=per_eval,
            show_progress=False, save_interval=10**9, with_timestamp=False,
            logger_adapter=d3rlpy.logging.NoopAdapterFactory(),
            evaluators={"return": d3rlpy.metrics.EnvironmentEvaluator(
                env, n_trials=args.eval_episodes)}):
        history.append((epoch, metrics))
        progress(args, epoch * per_eval, float(metrics["return"]), time.perf_counter() - t0)
    wall = time.perf_counter() - t0
    final = paired_returns(args.env, algo.predict, args.final_episodes)
    step_s_per_part = [float(m["time_step"]) for _, m in history]
    print(json.dumps({
        "library": f"d3rlpy {d3rlpy.__version__}", "algo": args.algo, "set": args.set,
        "greedy": args.greedy, "device": args.device,
        "batch_size": config.batch_size, "updates": per_eval * args.evals,
        "step_s_per_part": step_s_per_part, "wall_s": wall,
        "returns": [float(m["return"]) for _, m in history], "final_returns": final}))


if __name__ == "__main__":
    main()
