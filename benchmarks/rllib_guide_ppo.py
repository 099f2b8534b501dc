"""Benchmark: the PPO expert of RLlib's offline-data guide, its config as written
(`DefaultModelConfig(fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True)`,
lr 3e-4, 6 epochs, vf_loss_coeff 0.01, RLlib's other PPO defaults: 4,000 env steps and
186 minibatches of 128 an iteration), timed from process start until it reaches 450 by two
measures:

* the guide's stop metric, `evaluation/env_runners/episode_return_mean` (the loop evaluates
  after every iteration, as `docs/guides/rllib-offline-guide.md` does);
* RLlib's training metric, `env_runners/episode_return_mean` over the last 100 sampled
  episodes (what a run of the guide's config without evaluation can stop on).

RLlib 2.60 runs the same config with the training metric in the same command when
`--rllib-python` names an interpreter with `ray[rllib]==2.60.0` and torch (its own process:
RLlib is never a dependency); without it the figure issue 37 measured on this machine (67.6 s,
27 iterations, 108k env steps) is printed as the reference.

    python benchmarks/rllib_guide_ppo.py [--seed 0] [--max-iterations 100]
        [--rllib-python /path/to/venv/bin/python]
"""

import time

T_START = time.perf_counter()  # before jax is imported: "from process start"

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402

from rljax_offline import DefaultModelConfig, PPOConfig  # noqa: E402

TARGET = 450.0
QUOTED_RLLIB = {"seconds": 67.6, "iterations": 27, "env_steps": 108_000}

RLLIB_SCRIPT = """
import json, time
t0 = time.perf_counter()
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
config = (PPOConfig().environment("CartPole-v1")
          .training(lr=0.0003, num_epochs=6, vf_loss_coeff=0.01)
          .rl_module(model_config=DefaultModelConfig(
              fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True))
          .debugging(seed=SEED))
algo = config.build()
for it in range(1, MAX + 1):
    r = algo.train()
    if r["env_runners"].get("episode_return_mean", 0.0) >= 450.0:
        break
print("RLLIB " + json.dumps({"seconds": time.perf_counter() - t0, "iterations": it,
      "env_steps": r["env_runners"]["num_env_steps_sampled_lifetime"]}))
"""


def guide_config(seed: int):
    return (PPOConfig().environment("CartPole-v1")
            .training(lr=0.0003, num_epochs=6, vf_loss_coeff=0.01)
            .rl_module(model_config=DefaultModelConfig(
                fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True))
            .debugging(seed=seed))


def ours(seed: int, max_iterations: int) -> dict:
    """Both stop measures from one run: the first iteration each reached 450."""
    algo = guide_config(seed).build()
    reached: dict = {}
    for it in range(1, max_iterations + 1):
        result = algo.train()
        steps = result["num_env_steps_sampled_lifetime"]
        now = time.perf_counter() - T_START
        if "evaluation" not in reached and algo.evaluate()["episode_return_mean"] >= TARGET:
            reached["evaluation"] = {"seconds": now, "iterations": it, "env_steps": steps}
        if result["env_runners"]["episode_return_mean"] >= TARGET:
            reached["training"] = {"seconds": time.perf_counter() - T_START,
                                   "iterations": it, "env_steps": steps}
            break
    algo.stop()
    return reached


def rllib(python: str, seed: int, max_iterations: int) -> dict | None:
    script = RLLIB_SCRIPT.replace("SEED", str(seed)).replace("MAX", str(max_iterations))
    proc = subprocess.run([python, "-c", script], capture_output=True, text=True)
    line = [x for x in proc.stdout.splitlines() if x.startswith("RLLIB ")]
    if proc.returncode or not line:
        print(f"RLlib's run failed: {proc.stderr[-2000:]}")
        return None
    return json.loads(line[0].split(" ", 1)[1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-iterations", type=int, default=100)
    p.add_argument("--rllib-python", default=None)
    args = p.parse_args()
    reached = ours(args.seed, args.max_iterations)
    reference = rllib(args.rllib_python, args.seed, args.max_iterations) \
        if args.rllib_python else None
    label = "RLlib 2.60, this command" if reference else "RLlib 2.60, quoted by issue 37"
    reference = reference or QUOTED_RLLIB
    print(f"{'run':<44} {'seconds':>8} {'iterations':>10} {'env steps':>10}")
    for name, key in (("ours, guide's stop metric (evaluation)", "evaluation"),
                      ("ours, training metric (env_runners)", "training")):
        r = reached.get(key)
        if r is None:
            print(f"{name:<44} {'not reached in ' + str(args.max_iterations) + ' iterations'}")
            continue
        print(f"{name:<44} {r['seconds']:>8.1f} {r['iterations']:>10} {r['env_steps']:>10}"
              f"   {reference['seconds'] / r['seconds']:.1f}x faster than {label}")
    print(f"{label + ', training metric':<44} {reference['seconds']:>8.1f} "
          f"{reference['iterations']:>10} {reference['env_steps']:>10}")


if __name__ == "__main__":
    main()
