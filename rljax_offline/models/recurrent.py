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
from rljax_offline.models.initializers import LayerInits
from rljax_offline.models.sequences import (  # noqa: F401 - where the learners import them
    seq_lens_or_full,
    step_outputs,
    step_rows,
)


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
    inits: LayerInits = LayerInits()  # the head ones apply to the output layer

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
        return nn.Dense(self.out_dim, **self.inits.head(out.shape[-1], head_init()))(out), \
            new_state


def dummy_inputs(cell_type: str, cell_size: int, obs_shape, obs_dtype=jnp.float32):
    """Inputs of one sequence of one step, for `init`."""
    return (np.zeros((1, 1, *obs_shape), obs_dtype), initial_state(cell_type, cell_size, 1),
            np.ones(1, np.int32))
