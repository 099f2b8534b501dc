"""Diagnosis, run in d3rlpy's own interpreter: does d3rlpy 2.8.1's BEAR put its MMD term into
the actor after the warm-up?

`BEARImpl.compute_actor_loss` calls `update_alpha(mmd_loss)`, whose `backward()` of
`-mmd_loss` also reaches the actor's parameters, into the same `.grad` that the actor loss's
`backward()` of `sac_loss + mmd_loss` adds to next: the two MMD gradients cancel. This script
makes one post-warm-up actor update from the same start and batch with the multiplier at 1
and at 1000, and once with the multiplier's optimizer removed (so nothing cancels). Printed:
the largest weight difference of each pair. Equal updates at 1 and 1000 (a difference at the
float rounding of the cancelled terms, against about one Adam step when the MMD gradient is
kept) mean the actor never sees the MMD term: after its warm-up d3rlpy's BEAR trains a SAC
actor.

    D3RLPY_PYTHON benchmarks/d3rlpy_bear_actor_gradient.py [--seed 0]
"""

import argparse
import copy

import d3rlpy
import numpy as np
import torch
from d3rlpy.torch_utility import TorchMiniBatch


def actor_after_one_update(dataset, batch, alpha: float, keep_mmd_gradient: bool,
                           seed: int) -> dict:
    """The actor's weights after one update from d3rlpy's initial draw for `seed`."""
    d3rlpy.seed(seed)
    algo = d3rlpy.algos.BEARConfig(warmup_steps=0, initial_alpha=alpha).create(device="cpu:0")
    algo.build_with_dataset(dataset)
    impl = algo.impl
    if keep_mmd_gradient:  # no multiplier update: its backward cannot cancel anything
        object.__setattr__(impl._modules, "alpha_optim", None)
    torch.manual_seed(seed + 1)
    impl.update_actor(TorchMiniBatch.from_batch(batch, 0, "cpu:0", None, None, None))
    return copy.deepcopy(impl._modules.policy.state_dict())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    n = 2000  # Pendulum-shaped random transitions: the mechanism needs no real data
    obs = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
    terminals = np.zeros(n, np.float32)
    terminals[199::200] = 1.0
    dataset = d3rlpy.dataset.MDPDataset(obs, rng.uniform(-1, 1, (n, 1)).astype(np.float32),
                                        rng.normal(size=n).astype(np.float32), terminals)
    batch = d3rlpy.dataset.ReplayBuffer(d3rlpy.dataset.InfiniteBuffer(),
                                        episodes=dataset.episodes).sample_transition_batch(256)
    at_1 = actor_after_one_update(dataset, batch, 1.0, False, args.seed)
    at_1000 = actor_after_one_update(dataset, batch, 1000.0, False, args.seed)
    kept = actor_after_one_update(dataset, batch, 1.0, True, args.seed)

    def largest(a, b):
        return max(float((a[k] - b[k]).abs().max()) for k in a)

    print(f"actor weights after one update, multiplier 1 vs 1000: {largest(at_1, at_1000):.3g}")
    print(f"multiplier 1, its optimizer removed (MMD gradient kept) vs present: "
          f"{largest(at_1, kept):.3g}  (actor_learning_rate 1e-4: one Adam step)")


if __name__ == "__main__":
    main()
