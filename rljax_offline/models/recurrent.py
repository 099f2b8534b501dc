"""RLlib's default recurrent model (`use_lstm`, or `use_gru`): the observation encoder (the MLP
of `fcnet_hiddens`, or the CNN for images) as tokenizer, one LSTM/GRU layer of
`lstm_cell_size` units over time, and a linear head giving `action_dist_inputs`.

State, as RLlib names it: `{"h": [..., cell], "c": [..., cell]}` for an LSTM, `{"h": ...}` for
a GRU; zeros initially (RLlib's `get_initial_state`). Inputs have a time axis: `obs`
`[B, T, ...]` and `state_in` `[B, cell]` (the state before the first step), which is exactly
what the learner pipeline with `max_seq_len` builds (sequences never cross an episode start, so
no reset inside a sequence is needed) and what the env-to-module pipeline builds with `T = 1`.
Steps past `seq_lens` are padding: their outputs are masked by `loss_mask`, and the returned
`state_out` is the state after each sequence's last real step.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline.models.encoders import head_init


def initial_state(cell_type: str, cell_size: int, batch_size: int | None = None) -> dict:
    """Zeros of the state's structure; per item `[cell]`, or `[batch_size, cell]`."""
    shape = (cell_size,) if batch_size is None else (batch_size, cell_size)
    keys = ("h", "c") if cell_type == "lstm" else ("h",)
    # numpy: a constant wherever it is used, and no device program of its own when built
    return {k: np.zeros(shape, np.float32) for k in keys}


class RecurrentNet(nn.Module):
    """`(obs [B, T, ...], state_in, seq_lens [B]) -> (action_dist_inputs [B, T, d], state_out)`.

    `encoder` maps `[N, ...]` encoded observations to `[N, features]` and runs on all `B * T`
    steps at once; only the cell is scanned over time. With `out_dim=None` there is no head:
    the outputs are the cell's `[B, T, cell]` (the trunk of value and Q networks).
    """

    encoder: nn.Module
    cell_type: str
    cell_size: int
    out_dim: int | None  # None: the cell's outputs `[B, T, cell]` are the result (a trunk)

    @nn.compact
    def __call__(self, obs, state, seq_lens):
        B, T = obs.shape[:2]
        feats = self.encoder(obs.reshape(B * T, *obs.shape[2:])).reshape(B, T, -1)
        # The carry takes the features' dtype and device variance (an initial state made
        # inside a shard_map is replicated): a scan's carry must match its outputs.
        zero = jnp.zeros_like(feats[:, 0, :1])
        state = jax.tree_util.tree_map(lambda x: x.astype(feats.dtype) + zero, state)
        if self.cell_type == "lstm":
            cell, carry = nn.OptimizedLSTMCell(self.cell_size), (state["c"], state["h"])
        else:
            cell, carry = nn.GRUCell(self.cell_size), state["h"]
        carry, out = nn.RNN(cell, return_carry=True)(feats, initial_carry=carry,
                                                      seq_lengths=seq_lens)
        new_state = {"h": carry[1], "c": carry[0]} if self.cell_type == "lstm" else {"h": carry}
        if self.out_dim is None:
            return out, new_state
        return nn.Dense(self.out_dim, kernel_init=head_init())(out), new_state


def dummy_inputs(cell_type: str, cell_size: int, obs_shape, obs_dtype=jnp.float32):
    """Inputs of one sequence of one step, for `init`."""
    return (np.zeros((1, 1, *obs_shape), obs_dtype), initial_state(cell_type, cell_size, 1),
            np.ones(1, np.int32))


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
