"""A small self-contained jitted BC loop for the model acceptance tests (recurrent, CNN):
the learner pipeline runs once over all episodes, then minibatches of its rows (sequences for
a recurrent policy) train `policy.dist_inputs` + `policy.dist.logp` with optax's adam."""

import jax
import jax.numpy as jnp
import optax

from rljax_offline import EpisodeBatch
from rljax_offline.connectors import Context

COLUMNS = ("obs", "actions", "loss_mask", "state_in", "seq_lens")


def learner_batch(pipe, spaces, episodes):
    eb = EpisodeBatch.from_episodes(episodes)
    _, batch, _ = jax.jit(pipe.apply)(pipe.init(spaces), eb, {}, Context())
    return {k: batch[k] for k in COLUMNS if k in batch}


def bc_loss(policy, params, batch):
    """Mean negative log-likelihood of the recorded actions over the real (masked) steps."""
    logp = policy.dist.logp(policy.dist_inputs(params, batch), batch["actions"])
    mask = batch["loss_mask"].astype(jnp.float32)
    return -jnp.sum(logp * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def train_bc(policy, batch, *, steps: int, minibatch: int, lr: float = 3e-3, seed: int = 0):
    """`steps` adam updates on random minibatches of `batch`'s rows, all in one `lax.scan`.
    Returns the parameters and the losses of every update."""
    rows = batch["loss_mask"].shape[0]
    opt = optax.adam(lr)
    params = policy.init(jax.random.PRNGKey(seed))

    @jax.jit
    def run(params, key):
        def update(carry, k):
            params, opt_state = carry
            idx = jax.random.choice(k, rows, (minibatch,))
            mb = jax.tree_util.tree_map(lambda x: x[idx], batch)
            loss, grads = jax.value_and_grad(lambda p: bc_loss(policy, p, mb))(params)
            updates, opt_state = opt.update(grads, opt_state)
            return (optax.apply_updates(params, updates), opt_state), loss

        (params, _), losses = jax.lax.scan(update, (params, opt.init(params)),
                                           jax.random.split(key, steps))
        return params, losses

    return run(params, jax.random.PRNGKey(seed + 1))
