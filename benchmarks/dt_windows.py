"""What cutting the Decision Transformer's windows on the device costs: updates/s of the same
model and batch (64 windows of 20 steps) sampled as windows ending at any step
(`sample_unit="windows"`, cut from flat rows inside the update loop) against the fixed
sequences RLlib's time dim cuts once, up front (`sample_unit="timesteps"`), in one process,
taking turns, as a ratio. Pendulum's spaces, 100 episodes of 200 steps of random data
(the speed does not depend on the values).

    python benchmarks/dt_windows.py [--updates 200] [--repeats 3] [--layers 1] [--width 128]
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import jax
import numpy as np

from rljax_offline import DecisionTransformerConfig
from rljax_offline import spaces as sp
from rljax_offline.learning.data_parallel import DataParallel, select_devices
from rljax_offline.learning.init import init_state

EPISODES, LENGTH, CONTEXT, WINDOWS = 100, 200, 20, 64
# Pendulum's observation with the previous action and reward (what the config's
# prev_actions_rewards piece adds), and its action.
SPACES = (gym.spaces.Box(-8, 8, (5,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32))


def flat_columns(seed: int = 0) -> dict:
    """Every step of every episode, episode after episode."""
    rng = np.random.default_rng(seed)
    n = EPISODES * LENGTH
    return {"obs": rng.normal(size=(n, 5)).astype(np.float32),
            "actions": rng.uniform(-2, 2, (n, 1)).astype(np.float32),
            "returns_to_go": rng.uniform(-1.6, 0, n).astype(np.float32),
            "timesteps": np.tile(np.arange(LENGTH, dtype=np.int32), EPISODES)}


def fixed_sequences(flat: dict) -> dict:
    """The same steps in consecutive `CONTEXT`-step pieces of each episode (`add_time_dim`'s
    layout; 200 divides by 20, so every piece is full)."""
    seqs = {k: v.reshape(-1, CONTEXT, *v.shape[1:]) for k, v in flat.items()}
    n = len(seqs["obs"])
    return {**seqs, "loss_mask": np.ones((n, CONTEXT), bool),
            "seq_lens": np.full(n, CONTEXT, np.int32)}


def interleaved_rates(dp: DataParallel, learning, runs: dict, updates: int,
                      repeats: int) -> dict:
    """Updates/s of each `unit -> data` of `runs`: the best of `repeats` timed scans of
    `updates` updates, the units taking turns (so a change in the machine's load falls on
    both), after one scan each that compiles."""
    scans, states = {}, {}
    for unit, data in runs.items():
        scans[unit] = dp.scan_on_device(updates, unit, CONTEXT if unit == "windows" else None)
        states[unit], metrics = scans[unit](dp.put_replicated(init_state(learning, 0)), data)
        jax.block_until_ready(metrics)
    best = dict.fromkeys(runs, 0.0)
    for _ in range(repeats):
        for unit, data in runs.items():
            t0 = time.perf_counter()
            states[unit], metrics = scans[unit](states[unit], data)
            jax.block_until_ready(metrics)
            best[unit] = max(best[unit], updates / (time.perf_counter() - t0))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--width", type=int, default=128)
    args = parser.parse_args()
    config = DecisionTransformerConfig().training(
        target_return=-150.0, num_layers=args.layers).rl_module(
        model_config={"fcnet_hiddens": [args.width], "fcnet_activation": "relu"})
    spec = config.make_spec(sp.to_spec(SPACES[0]), sp.to_spec(SPACES[1]))
    dp = DataParallel(spec.learning, select_devices(1), WINDOWS, mode="jit")
    flat = flat_columns()
    lengths = [LENGTH] * EPISODES
    rates = interleaved_rates(dp, spec.learning, {
        "windows": dp.put_data(flat, lengths),
        "timesteps": dp.put_data(fixed_sequences(flat))}, args.updates, args.repeats)
    print(f"Decision Transformer, {args.layers} block(s), {args.width}-wide, {WINDOWS} windows "
          f"of {CONTEXT} steps, {jax.devices()[0].platform}:")
    print(f"  windows ending at any step (cut on the device): {rates['windows']:8.1f} updates/s")
    print(f"  fixed sequences (cut up front):                 {rates['timesteps']:8.1f} updates/s")
    print(f"  ratio windows / fixed: {rates['windows'] / rates['timesteps']:.2f}x")


if __name__ == "__main__":
    main()
