"""The reference for `bc_cartpole.py`: the same job written by hand with no library of ours,
as tight as a short script gets. It reads the same Parquet episode rows (pyarrow, msgpack and
msgpack-numpy), trains the same model (MLP [256, 256] relu -> 2 logits, Adam 1e-3) on
batches of 1024 drawn on the device, 100 updates in one jitted `lax.scan`, and evaluates 5
greedy episodes stepped in lockstep (one jitted call a step for all five), until the mean
return is >= 450. Its init is one jitted program (op-by-op init compiles every small op).

It prints one JSON line with the same parts as `bc_cartpole.py`'s child: import, build
(params and optimizer state), read, train, evaluate, total; run it in a fresh process, with
the JAX cache folder as the only argument (empty: cold; filled by a run before: warm).
"""

import time

T_START = time.perf_counter()

import glob  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import gymnasium as gym  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import msgpack  # noqa: E402
import msgpack_numpy  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

SIZES = (4, 256, 256, 2)
BATCH, UPDATES, EVAL_EPISODES = 1024, 100, 5


def read(folder: str) -> tuple[np.ndarray, np.ndarray]:
    """(observations, actions) of every episode row in the folder's Parquet files."""
    obs, act = [], []
    for path in sorted(glob.glob(os.path.join(folder, "**", "*.parquet"), recursive=True)):
        for blob in pq.read_table(path, columns=["item"]).column(0).to_pylist():
            state = msgpack.unpackb(blob, object_hook=msgpack_numpy.decode,
                                    strict_map_key=False)
            a = np.asarray(state["actions"]["data"])
            act.append(a)
            obs.append(np.asarray(state["observations"]["data"])[:len(a)])
    return np.concatenate(obs).astype(np.float32), np.concatenate(act).astype(np.int32)


def forward(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def main():
    cache = sys.argv[1]
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    opt = optax.adam(1e-3)
    t_import = time.perf_counter() - T_START

    t0 = time.perf_counter()

    @jax.jit
    def init(key):
        params = []
        for i, (m, n) in enumerate(zip(SIZES[:-1], SIZES[1:])):
            w = jax.random.normal(jax.random.fold_in(key, i), (m, n)) * jnp.sqrt(2.0 / m)
            params.append((w, jnp.zeros(n)))
        return params, opt.init(params)

    params, opt_state = init(jax.random.PRNGKey(0))
    t_build = time.perf_counter() - t0

    t0 = time.perf_counter()
    obs, act = read(sys.argv[2])
    obs_d, act_d = jax.device_put(obs), jax.device_put(act)
    n = len(obs)
    t_read = time.perf_counter() - t0

    def loss_fn(p, o, a):
        return optax.softmax_cross_entropy_with_integer_labels(forward(p, o), a).mean()

    @jax.jit
    def train(params, opt_state, key):
        def step(carry, k):
            p, s = carry
            idx = jax.random.randint(k, (BATCH,), 0, n)
            loss, g = jax.value_and_grad(loss_fn)(p, obs_d[idx], act_d[idx])
            u, s = opt.update(g, s, p)
            return (optax.apply_updates(p, u), s), loss
        (params, opt_state), losses = jax.lax.scan(step, (params, opt_state),
                                                   jax.random.split(key, UPDATES))
        return params, opt_state, losses[-1]

    policy = jax.jit(lambda p, o: jnp.argmax(forward(p, o), -1))
    envs = [gym.make("CartPole-v1") for _ in range(EVAL_EPISODES)]

    def evaluate(p, seed):
        o = np.stack([e.reset(seed=seed + i)[0] for i, e in enumerate(envs)])
        done, ret = np.zeros(len(envs), bool), np.zeros(len(envs))
        while not done.all():
            actions = np.asarray(policy(p, o))
            for i, e in enumerate(envs):
                if not done[i]:
                    o[i], r, term, trunc, _ = e.step(int(actions[i]))
                    ret[i] += r
                    done[i] = term or trunc
        return float(ret.mean())

    key = jax.random.PRNGKey(1)
    train_s, eval_s, first_train, ret, iterations = 0.0, 0.0, None, 0.0, 0
    for it in range(50):
        t0 = time.perf_counter()
        params, opt_state, loss = train(params, opt_state, jax.random.fold_in(key, it))
        jax.block_until_ready(params)
        dt = time.perf_counter() - t0
        first_train = dt if first_train is None else first_train
        train_s += dt
        t0 = time.perf_counter()
        ret = evaluate(params, 10_000 + 1_000 * it)
        eval_s += time.perf_counter() - t0
        iterations += 1
        if ret >= 450:
            break
    print(json.dumps({
        "import_s": round(t_import, 3), "build_s": round(t_build, 3), "read_s": round(t_read, 3),
        "train_s": round(train_s, 3), "evaluate_s": round(eval_s, 3),
        "first_train_s": round(first_train, 3),
        "total_s": round(time.perf_counter() - T_START, 3),
        "process_cpu_s": round(sum(os.times()[:2]), 3), "timesteps": int(n),
        "iterations": iterations, "updates": iterations * UPDATES, "final_return": ret,
        "reached_450": ret >= 450}))


if __name__ == "__main__":
    main()
