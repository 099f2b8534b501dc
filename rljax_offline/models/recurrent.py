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

from rljax_offline.models.encoders import head_init


def initial_state(cell_type: str, cell_size: int, batch_size: int | None = None) -> dict:
    """Zeros of the state's structure; per item `[cell]`, or `[batch_size, cell]`."""
    shape = (cell_size,) if batch_size is None else (batch_size, cell_size)
    keys = ("h", "c") if cell_type == "lstm" else ("h",)
    return {k: jnp.zeros(shape, jnp.float32) for k in keys}


class RecurrentNet(nn.Module):
    """`(obs [B, T, ...], state_in, seq_lens [B]) -> (action_dist_inputs [B, T, d], state_out)`.

    `encoder` maps `[N, ...]` encoded observations to `[N, features]` and runs on all `B * T`
    steps at once; only the cell is scanned over time.
    """

    encoder: nn.Module
    cell_type: str
    cell_size: int
    out_dim: int

    @nn.compact
    def __call__(self, obs, state, seq_lens):
        B, T = obs.shape[:2]
        feats = self.encoder(obs.reshape(B * T, *obs.shape[2:])).reshape(B, T, -1)
        if self.cell_type == "lstm":
            cell, carry = nn.OptimizedLSTMCell(self.cell_size), (state["c"], state["h"])
        else:
            cell, carry = nn.GRUCell(self.cell_size), state["h"]
        carry, out = nn.RNN(cell, return_carry=True)(feats, initial_carry=carry,
                                                      seq_lengths=seq_lens)
        logits = nn.Dense(self.out_dim, kernel_init=head_init())(out)
        new_state = {"h": carry[1], "c": carry[0]} if self.cell_type == "lstm" else {"h": carry}
        return logits, new_state


def dummy_inputs(cell_type: str, cell_size: int, obs_shape, obs_dtype=jnp.float32):
    """Inputs of one sequence of one step, for `init`."""
    return (jnp.zeros((1, 1, *obs_shape), obs_dtype), initial_state(cell_type, cell_size, 1),
            jnp.ones(1, jnp.int32))


def seq_lens_or_full(batch: dict) -> jax.Array:
    """`seq_lens` of a batch, or every sequence full length when the batch has none."""
    if "seq_lens" in batch:
        return jnp.asarray(batch["seq_lens"], jnp.int32)
    obs = jax.tree_util.tree_leaves(batch["obs"])[0]
    return jnp.full(obs.shape[0], obs.shape[1], jnp.int32)
