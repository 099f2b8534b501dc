"""The conditional VAE that BCQ, PLAS and BEAR model the data's actions with, and the networks on
`(observation, vector)` inputs they are built from.

* encoder: `(s, a) -> (mu, log_std)` of the latent `z` (`latent_dim` wide), `log_std`
  clipped to `[-4, 15]` (d3rlpy's bounds for BCQ and PLAS);
* decoder: `(s, z) -> tanh(...)`, an action in the unit box (actions scaled to `[-1, 1]` by the
  Box bounds, as d3rlpy's `MinMaxActionScaler`); with `squash=False` its raw output (what
  d3rlpy 2.8's `VAEDecoder` returns at its default `with_squash=True`), which the loss then
  fits and the caller clips;
* loss per example: `mean_d (D(s, z) - a)^2 + beta * mean_j KL(N(mu_j, sigma_j) || N(0, 1))`,
  `z = mu + sigma * eps` reparameterised (d3rlpy's `compute_vae_error`: a mean over the
  action's and the latent's dimensions);
* sampling: `D(s, clip(eps, -0.5, 0.5))`, `eps ~ N(0, I)` (the paper's clipped latent: the
  decoder's actions stay near the data's).

Each network is an MLP of the model config's `fcnet_hiddens` / `fcnet_activation` /
initializers on the encoded observation concatenated with the vector input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from rljax_offline import spaces as sp
from rljax_offline.learning.losses import per_example_normal
from rljax_offline.models.encoders import encode_observations
from rljax_offline.models.networks import mlp_network

__all__ = ["ConditionalVAE", "ConditionedMLP", "conditional_vae", "conditioned_mlp",
           "imitator_loss", "sample_latent", "vae_loss"]

LATENT_CLIP = 0.5
LOG_STD_MIN, LOG_STD_MAX = -4.0, 15.0


class ConditionedMLP(NamedTuple):
    """An MLP on `(observation, vector)`: `init(rng) -> params`, `apply(params, obs [N, ...],
    vector [N, d]) -> [N, out_dim]`."""

    init: Callable
    apply: Callable


def conditioned_mlp(obs_spec: Any, in_dim: int, out_dim: int, model_config: dict
                    ) -> ConditionedMLP:
    """An MLP whose input is the encoded observation with an `in_dim` vector beside it.

    Args:
      obs_spec: the observation space's spec (flat Box, Discrete or MultiDiscrete).
      in_dim: the width of the vector input (an action, a latent).
      out_dim: the output width.
      model_config: RLlib's model-config keys (`fcnet_hiddens`, `fcnet_activation`, the
        initializer keys).
    """
    width = int(sp.flat_dim(obs_spec)) + int(in_dim)
    flat = sp.BoxSpec((width,), "float32", (-float("inf"),) * width, (float("inf"),) * width)
    net = mlp_network(flat, out_dim, model_config)

    def apply(params, obs, vector):
        x = jnp.concatenate([encode_observations(obs_spec, jnp.asarray(obs)),
                             jnp.asarray(vector, jnp.float32)], axis=-1)
        return net.apply(params, x)

    return ConditionedMLP(net.init, apply)


class ConditionalVAE(NamedTuple):
    """`init(rng) -> {"encoder", "decoder"}`; `encode(params, obs, unit_actions) -> (mu,
    log_std)`; `decode(params, obs, latent) -> unit actions`; `latent_dim`;
    `decode_pre_tanh(params, obs, latent)`, the decoder's output before its tanh (BEAR's MMD
    in d3rlpy's space)."""

    init: Callable
    encode: Callable
    decode: Callable
    latent_dim: int
    decode_pre_tanh: Callable


def conditional_vae(obs_spec: Any, act_dim: int, latent_dim: int, model_config: dict,
                    squash: bool = True) -> ConditionalVAE:
    """The VAE of actions given observations (see the module docstring).

    Args:
      obs_spec: the observation space's spec.
      act_dim: the flat action width.
      latent_dim: the latent's width (BCQ and PLAS: twice the action's).
      model_config: the encoder's and the decoder's model config.
      squash: tanh on the decoder's output (the paper's); False: its raw output, as d3rlpy's.
    """
    encoder = conditioned_mlp(obs_spec, act_dim, 2 * latent_dim, model_config)
    decoder = conditioned_mlp(obs_spec, latent_dim, act_dim, model_config)

    def init(rng):
        k1, k2 = jax.random.split(rng)
        return {"encoder": encoder.init(k1), "decoder": decoder.init(k2)}

    def encode(params, obs, unit_actions):
        mu, log_std = jnp.split(encoder.apply(params["encoder"], obs, unit_actions), 2, -1)
        return mu, jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)

    def decode_pre_tanh(params, obs, latent):
        return decoder.apply(params["decoder"], obs, latent)

    def decode(params, obs, latent):
        raw = decode_pre_tanh(params, obs, latent)
        return jnp.tanh(raw) if squash else raw

    return ConditionalVAE(init, encode, decode, int(latent_dim), decode_pre_tanh)


def vae_loss(vae: ConditionalVAE, params, obs, unit_actions, keys, beta: float):
    """The VAE's loss per example `[N]` and its metrics: reconstruction plus `beta` times
    the KL divergence to the standard normal prior.

    Args:
      vae: the `ConditionalVAE`.
      params: its params (`{"encoder", "decoder"}`).
      obs: observations `[N, ...]`.
      unit_actions: the data's actions in the unit box, `[N, d]`.
      keys: one key per example, `[N, 2]` (the reparameterised draw).
      beta: the KL term's weight.
    """
    mu, log_std = vae.encode(params, obs, unit_actions)
    z = mu + jnp.exp(log_std) * per_example_normal(keys, (vae.latent_dim,))
    recon = jnp.mean((vae.decode(params, obs, z) - unit_actions) ** 2, axis=-1)
    kl = jnp.mean(0.5 * (mu**2 + jnp.exp(2 * log_std) - 1.0) - log_std, axis=-1)
    loss = recon + beta * kl
    return loss, {"vae_loss": loss, "vae_recon_loss": recon, "vae_kl": kl}


def imitator_loss(vae: ConditionalVAE, to_unit, beta: float):
    """The `imitator` loss function `(params, batch, rng, axis) -> (loss, metrics)`:
    `vae_loss` of `params["vae"]` on the batch's observations and its actions in the unit box.

    Args:
      vae: the `ConditionalVAE`.
      to_unit: the env's actions to the unit box.
      beta: the KL term's weight.
    """

    def loss(params, batch, rng, axis):
        return vae_loss(vae, params["vae"], batch["obs"], to_unit(batch["actions"]), rng, beta)

    return loss


def sample_latent(keys: jax.Array, latent_dim: int) -> jax.Array:
    """The clipped latents the decoder samples actions from: `clip(N(0, I), -0.5, 0.5)`,
    one `[latent_dim]` draw per key of `keys [N, 2]`.

    Args:
      keys: one key per draw.
      latent_dim: the latent's width.
    """
    return jnp.clip(per_example_normal(keys, (latent_dim,)), -LATENT_CLIP, LATENT_CLIP)
