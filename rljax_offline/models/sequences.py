"""A network's outputs at every timestep of a learner batch, feed-forward or recurrent alike
(`step_outputs`), and a batch column as rows to match (`step_rows`). No flax here: the
`Module` protocol builds on these, and acting imports it without the networks' library."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def seq_lens_or_full(batch: dict) -> jax.Array:
    """`seq_lens` of a batch, or every sequence full length when the batch has none."""
    if "seq_lens" in batch:
        return jnp.asarray(batch["seq_lens"], jnp.int32)
    obs = jax.tree_util.tree_leaves(batch["obs"])[0]
    return jnp.full(obs.shape[0], obs.shape[1], jnp.int32)


def step_outputs(apply, forward, params, batch: dict, state_in=None, with_next: bool = False):
    """A network's outputs at every timestep of a learner batch, as rows `[N, ...]` (`N` is
    `loss_mask.size`: the flat rows, or `B * T` of a sequence batch, row-major like the mask),
    and with `with_next` its outputs at the next observations `new_obs` as well.

    Feed-forward (`forward` None): `apply(params, obs)` on `obs` and on `new_obs`.
    Recurrent: `forward(params, {obs, state_in, seq_lens}) -> (out [B, T, ...], state)` unrolled
    from `state_in`; with `with_next` ONE unroll over `[obs_0, new_obs_0, ..., new_obs_{T-1}]`
    (`seq_lens + 1` steps: `new_obs_t` is `obs_{t+1}` inside an episode, and the last one is
    the observation after the sequence's last step), so the next-step outputs carry the state
    through the sequence exactly as acting would, the bootstrap step included.
    """
    if forward is None:
        out = apply(params, batch["obs"])
        return out, (apply(params, batch["new_obs"]) if with_next else None)
    obs = batch["obs"]
    B, T = jax.tree_util.tree_leaves(obs)[0].shape[:2]
    seq_lens = seq_lens_or_full(batch)
    if with_next:
        obs = jax.tree_util.tree_map(lambda o, n: jnp.concatenate([o[:, :1], n], axis=1), obs,
                                     batch["new_obs"])
        seq_lens = seq_lens + 1
    out, _ = forward(params, {"obs": obs, "state_in": state_in, "seq_lens": seq_lens})

    def rows(x):
        return x.reshape(B * T, *x.shape[2:])

    if not with_next:
        return rows(out), None
    return rows(out[:, :T]), rows(out[:, 1:])


def step_rows(batch: dict, key: str):
    """Column `key` of a learner batch as rows `[N, ...]` matching `step_outputs` (a sequence
    batch's `[B, T, ...]` flattened over `B * T`; a flat batch unchanged)."""
    lead = jnp.ndim(batch["loss_mask"]) if "loss_mask" in batch else 1
    return jax.tree_util.tree_map(lambda x: x.reshape(-1, *x.shape[lead:]), batch[key])
