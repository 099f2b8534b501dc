"""The Decision Transformer's network (Chen et al. 2021): a causal GPT-2 over the interleaved
tokens `(R_1, s_1, a_1, R_2, s_2, a_2, ...)` of one context of `T <= context_size` steps,
whose output at each state token predicts that step's action.

* tokens: `R_t` through a linear embedding of the (scaled) return-to-go, `s_t` through the
  observation encoder (the MLP of `fcnet_hiddens`; its last width is the embedding width
  `W`), `a_t` through a linear embedding of the flat action (one-hot for Discrete, without a
  bias: an embedding table); `embed_activation` (tanh for Discrete, d3rlpy's) on each;
* position: "simple" adds a learned embedding of the step's absolute timestep to its three
  tokens; "global" adds the embedding of the context's last timestep plus a learned
  per-position block embedding (d3rlpy's `GlobalPositionEncoding`);
* then LayerNorm, dropout (`embed_dropout`), `num_layers` pre-LayerNorm blocks of causal
  multi-head attention (`num_heads`, `attn_dropout`) and a `4 W` feed-forward layer
  (`activation`), each added back after `resid_dropout`, a final LayerNorm, and a linear
  head on the state tokens.

Weights are drawn as GPT-2's (normal with std 0.02, zero biases); the encoder keeps the model
config's draw. One sequence at a time: callers `vmap` over sequences (each with its own dropout
key, so a batch's result does not depend on how it is split over devices).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

__all__ = ["ACTIVATIONS", "DecisionTransformerNet", "causal_outputs"]

# d3rlpy's `activation_type` names (GELU exact, as PyTorch's default)
ACTIVATIONS = {"relu": nn.relu, "gelu": lambda x: nn.gelu(x, approximate=False),
               "tanh": nn.tanh, "swish": nn.swish, "identity": lambda x: x}

GPT_INIT = nn.initializers.normal(0.02)


def _dense(width: int, use_bias: bool = True) -> nn.Dense:
    return nn.Dense(width, use_bias=use_bias, kernel_init=GPT_INIT,
                    bias_init=nn.initializers.zeros)


class _Block(nn.Module):
    """A pre-LayerNorm GPT-2 block: causal attention, then the feed-forward layer."""

    num_heads: int
    activation: str
    attn_dropout: float
    resid_dropout: float

    @nn.compact
    def __call__(self, x, mask, train: bool):
        width = x.shape[-1]
        h = nn.LayerNorm(epsilon=1e-5)(x)
        h = nn.MultiHeadDotProductAttention(
            num_heads=self.num_heads, dropout_rate=self.attn_dropout, deterministic=not train,
            kernel_init=GPT_INIT, bias_init=nn.initializers.zeros)(h, h, mask=mask)
        x = x + nn.Dropout(self.resid_dropout, deterministic=not train)(h)
        h = nn.LayerNorm(epsilon=1e-5)(x)
        h = _dense(width)(ACTIVATIONS[self.activation](_dense(4 * width)(h)))
        return x + nn.Dropout(self.resid_dropout, deterministic=not train)(h)


class DecisionTransformerNet(nn.Module):
    """`(obs [T, D], actions [T, A], rtg [T], timesteps [T] int, last [] int) -> [T, out_dim]`:
    the head's output at each state token (see the module docstring). `timesteps` are 0-based
    steps since the episode's reset (embedded as `t + 1`, d3rlpy's, clipped below
    `max_timestep`); `last` is the index of the context's last real step ("global" reads its
    timestep)."""

    encoder: nn.Module
    out_dim: int
    context_size: int
    max_timestep: int
    num_heads: int
    num_layers: int
    attn_dropout: float
    resid_dropout: float
    embed_dropout: float
    activation: str
    embed_activation: str
    position_encoding_type: str
    discrete_actions: bool

    @nn.compact
    def __call__(self, obs, actions, rtg, timesteps, last, train: bool = False):
        T = obs.shape[0]
        state = self.encoder(obs)
        width = state.shape[-1]
        t = jnp.clip(timesteps.astype(jnp.int32) + 1, 0, self.max_timestep - 1)
        table = nn.Embed(self.max_timestep, width, embedding_init=GPT_INIT)
        if self.position_encoding_type == "simple":
            position = table(t)
        else:
            block = self.param("block_position", nn.initializers.zeros,
                               (self.context_size, width))
            position = table(t[last])[None, :] + block[:T].astype(state.dtype)
        act = ACTIVATIONS[self.embed_activation]
        rtg_e = act(_dense(width)(rtg[:, None]) + position)
        state_e = act(state + position)
        action_e = act(_dense(width, not self.discrete_actions)(actions) + position)
        h = jnp.stack([rtg_e, state_e, action_e], axis=1).reshape(3 * T, width)
        h = nn.LayerNorm(epsilon=1e-5)(h)
        h = nn.Dropout(self.embed_dropout, deterministic=not train)(h)
        mask = nn.make_causal_mask(jnp.zeros(3 * T), dtype=bool)
        for _ in range(self.num_layers):
            h = _Block(self.num_heads, self.activation, self.attn_dropout,
                       self.resid_dropout)(h, mask, train)
        h = nn.LayerNorm(epsilon=1e-5)(h)
        return _dense(self.out_dim)(h.reshape(T, 3, width)[:, 1])


def causal_outputs(net: DecisionTransformerNet, params, obs, actions, rtg, timesteps, last,
                   keys=None) -> jax.Array:
    """The net on a batch of sequences `[B, T, ...]` (`last` `[B]`): `vmap` over sequences;
    with `keys` `[B, 2]` in training mode (dropout, each sequence its own key).

    Args:
      net: the network.
      params: its params.
      obs: `[B, T, D]`.
      actions: `[B, T, A]`.
      rtg: `[B, T]`.
      timesteps: `[B, T]`.
      last: `[B]`.
      keys: dropout keys `[B, 2]`, or None (evaluation mode).
    """
    if keys is None:
        return jax.vmap(lambda *a: net.apply(params, *a))(obs, actions, rtg, timesteps, last)
    return jax.vmap(lambda o, a, r, t, i, k: net.apply(
        params, o, a, r, t, i, True, rngs={"dropout": k}))(obs, actions, rtg, timesteps, last,
                                                            keys)
