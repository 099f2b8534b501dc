"""Benchmark: our on-device replay buffer (`rljax_offline.data.replay`) against flashbax's
item buffer (`flashbax.make_item_buffer`, the installed 0.1.3), in one process, on the work SAC
gives a buffer: every iteration adds one rollout of `--rows` transitions from the host (a
padded, fixed-shape chunk for ours, with its count; exactly `--rows` items for flashbax, which
has no count) and its updates sample `--updates` minibatches of `--batch` rows inside one jitted
`lax.scan`. Hopper-sized rows (obs 11, actions 3, reward, next obs, terminated, n_step),
`--capacity` rows, the ring full and wrapping. Each side: best of `--repeats` timings after a
warm-up call; the ratio is ours / flashbax (below 1: ours faster).

    python benchmarks/replay_buffer.py [--capacity 100000] [--rows 100] [--batch 256]
"""

import argparse
import json
import time

import flashbax as fbx
import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline.data.replay import make_replay_buffer


def _rows(n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"obs": rng.normal(size=(n, 11)).astype(np.float32),
            "actions": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            "rewards": rng.normal(size=n).astype(np.float32),
            "new_obs": rng.normal(size=(n, 11)).astype(np.float32),
            "terminateds": rng.random(n) < 0.01,
            "n_step": np.ones(n, np.int32)}


def _best(fn, repeats: int) -> float:
    fn()  # compile and warm
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _ours(args, chunks):
    buf = make_replay_buffer(capacity=args.capacity, batch_size=args.batch)
    add = jax.jit(buf.add, donate_argnums=0)
    state = {"s": buf.init(chunks[0])}

    @jax.jit
    def draws(state, key):
        def body(k, _):
            k, sub = jax.random.split(k)
            return k, jnp.sum(buf.sample(state, sub)["obs"])
        return jax.lax.scan(body, key, None, length=args.updates)[1]

    def adds():
        for c in chunks:
            state["s"] = add(state["s"], c, np.int32(args.rows))
        jax.block_until_ready(state["s"])

    adds()  # the ring full before sampling is timed
    add_s = _best(adds, args.repeats)
    sample_s = _best(lambda: draws(state["s"], jax.random.PRNGKey(0)).block_until_ready(),
                     args.repeats)
    return add_s, sample_s


def _flashbax(args, chunks):
    buf = fbx.make_item_buffer(max_length=args.capacity, min_length=1,
                               sample_batch_size=args.batch, add_sequences=True)
    add = jax.jit(buf.add, donate_argnums=0)
    example = jax.tree_util.tree_map(lambda x: x[0], chunks[0])
    state = {"s": buf.init(example)}

    @jax.jit
    def draws(state, key):
        def body(k, _):
            k, sub = jax.random.split(k)
            return k, jnp.sum(buf.sample(state, sub).experience["obs"])
        return jax.lax.scan(body, key, None, length=args.updates)[1]

    def adds():
        for c in chunks:
            state["s"] = add(state["s"], c)
        jax.block_until_ready(state["s"])

    adds()
    add_s = _best(adds, args.repeats)
    sample_s = _best(lambda: draws(state["s"], jax.random.PRNGKey(0)).block_until_ready(),
                     args.repeats)
    return add_s, sample_s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--capacity", type=int, default=100_000)
    p.add_argument("--rows", type=int, default=100, help="transitions one add writes")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--updates", type=int, default=100, help="minibatches one scan samples")
    p.add_argument("--adds", type=int, default=200, help="adds timed together")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    chunks = [_rows(args.rows, i) for i in range(args.adds)]
    ours = _ours(args, chunks)
    theirs = _flashbax(args, chunks)
    out = {"settings": vars(args), "backend": jax.default_backend()}
    for what, i, per in (("add", 0, args.adds), ("sample", 1, args.updates)):
        out[what] = {"ours_us_per_call": round(1e6 * ours[i] / per, 1),
                     "flashbax_us_per_call": round(1e6 * theirs[i] / per, 1),
                     "ratio_ours_over_flashbax": round(ours[i] / theirs[i], 3)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
