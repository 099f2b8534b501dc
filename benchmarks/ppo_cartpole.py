"""Benchmark: RLlib's offline-data guide on CartPole-v1. Wall time and env steps until the
sampled return mean (RLlib's `env_runners/episode_return_mean`, last 20 episodes) reaches 450,
for PPO from scratch and for PPO fine-tuned from a BC clone of the PPO expert (the expert's
checkpoint records the episodes; BC trains on them until its greedy evaluation reaches 450, at
most `--bc-iterations` x 50 updates, as in RLlib's guide). The fine-tuning runs at
`--finetune-lr` (default 3e-4); the ratio of env steps is taken against a second run from
scratch at that same learning rate and seed (the expert's run, at the tuned 1e-3, is printed
but in no ratio). When `ray[rllib]` is importable, RLlib's PPO runs with the expert run's
settings in the same command.

    python benchmarks/ppo_cartpole.py [--seed 0] [--bc-iterations 10] [--record-episodes 50]
        [--finetune-lr 3e-4] [--max-env-steps 200000]
"""

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))

from rljax_offline.acting.recording import record_policy  # noqa: E402
from rljax_offline.apps.workflow import (  # noqa: E402
    TARGET,
    cartpole_bc_config,
    cartpole_ppo_config,
    train_bc_until,
    train_ppo_until,
)


def rllib_ppo_to_target(seed: int, max_env_steps: int) -> dict | None:
    """RLlib's PPO with the same settings, or None when `ray[rllib]` is not importable."""
    try:
        from ray.rllib.algorithms.ppo import PPOConfig as RLlibPPOConfig
    except ImportError:
        return None
    ours = cartpole_ppo_config(seed)
    config = (RLlibPPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=0,
                           num_envs_per_env_runner=ours.num_envs_per_env_runner)
              .training(lr=ours.lr, num_epochs=ours.num_epochs,
                        minibatch_size=ours.minibatch_size,
                        train_batch_size_per_learner=ours.train_batch_size_per_learner,
                        lambda_=ours.lambda_, vf_clip_param=ours.vf_clip_param,
                        vf_loss_coeff=ours.vf_loss_coeff)
              .rl_module(model_config={"fcnet_hiddens": ours.model_config["fcnet_hiddens"],
                                       "fcnet_activation": "tanh"})
              .reporting(metrics_num_episodes_for_smoothing=20)
              .debugging(seed=seed))
    t0 = time.perf_counter()
    algo = config.build()
    steps, reached = 0, None
    while steps < max_env_steps:
        result = algo.train()
        steps = result["env_runners"]["num_env_steps_sampled_lifetime"]
        if result["env_runners"].get("episode_return_mean", 0.0) >= TARGET:
            reached = steps
            break
    algo.stop()
    return {"env_steps_to_450": reached, "seconds": time.perf_counter() - t0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bc-iterations", type=int, default=10)
    ap.add_argument("--record-episodes", type=int, default=50)
    ap.add_argument("--max-env-steps", type=int, default=200_000)
    ap.add_argument("--finetune-lr", type=float, default=3e-4)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ppo_cartpole_")

    scratch = train_ppo_until(cartpole_ppo_config(args.seed), max_env_steps=args.max_env_steps)
    expert = os.path.join(work, "ppo_expert")
    scratch.algo.save(expert)
    scratch.algo.stop()

    t0 = time.perf_counter()
    data = os.path.join(work, "recorded")
    record_policy("CartPole-v1", expert, data, num_episodes=args.record_episodes,
                  seed=args.seed, progress=False)
    t_record = time.perf_counter() - t0

    bc = train_bc_until(cartpole_bc_config(data, args.seed), max_iterations=args.bc_iterations)
    bc_updates, bc_return = bc.curve[-1]
    clone = os.path.join(work, "bc_clone")
    bc.algo.save(clone)
    bc.algo.stop()

    tuned = train_ppo_until(cartpole_ppo_config(args.seed, lr=args.finetune_lr,
                                                init_policy_from=clone),
                            max_env_steps=args.max_env_steps)
    tuned.algo.stop()
    # The same settings as the fine-tuning but from scratch: the run the ratio compares with.
    same_lr = train_ppo_until(cartpole_ppo_config(args.seed, lr=args.finetune_lr),
                              max_env_steps=args.max_env_steps)
    same_lr.algo.stop()
    ratio = (round(same_lr.reached_at / tuned.reached_at, 1)
             if same_lr.reached_at is not None and tuned.reached_at is not None else None)
    rllib = rllib_ppo_to_target(args.seed, args.max_env_steps)

    def steps(run):
        return run.reached_at if run.reached_at is not None else f"> {args.max_env_steps}"

    rows = [("PPO from scratch (the expert, lr 1e-3): env steps / wall s to 450 (of it build)",
             f"{steps(scratch)} / {scratch.seconds:.1f} ({scratch.build_seconds:.1f})"),
            (f"record {args.record_episodes} episodes from the PPO checkpoint",
             f"{t_record:.1f} s"),
            ("BC clone: updates / greedy return / wall s",
             f"{bc_updates} / {bc_return:.1f} / {bc.seconds:.1f}"),
            ("PPO fine-tuned from the clone: env steps / wall s to 450 (of it build, "
             "incl. value warm-up)",
             f"{steps(tuned)} / {tuned.seconds:.1f} ({tuned.build_seconds:.1f})"),
            (f"PPO from scratch at the fine-tuning's lr {args.finetune_lr:g}: env steps / wall s",
             f"{steps(same_lr)} / {same_lr.seconds:.1f}"),
            ("env steps from scratch / fine-tuned, same lr and seed",
             "n/a (a run did not reach 450)" if ratio is None else f"{ratio}x"),
            ("RLlib PPO, same settings",
             "skipped: ray[rllib] is not importable" if rllib is None else
             f"{rllib['env_steps_to_450']} / {rllib['seconds']:.1f} s "
             f"(ours {rllib['seconds'] / scratch.seconds:.1f}x faster)")]
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows))
    print(json.dumps({"benchmark": "ppo_cartpole", "seed": args.seed,
                      "scratch_env_steps": scratch.reached_at,
                      "scratch_seconds": round(scratch.seconds, 2),
                      "scratch_build_seconds": round(scratch.build_seconds, 2),
                      "bc_updates": bc_updates, "bc_return": bc_return,
                      "finetuned_env_steps": tuned.reached_at,
                      "finetuned_seconds": round(tuned.seconds, 2),
                      "finetuned_build_seconds": round(tuned.build_seconds, 2),
                      "finetune_lr": args.finetune_lr,
                      "scratch_same_lr_env_steps": same_lr.reached_at,
                      "scratch_same_lr_seconds": round(same_lr.seconds, 2),
                      "env_steps_scratch_vs_finetuned_same_lr": ratio,
                      "rllib": rllib}))


if __name__ == "__main__":
    main()
