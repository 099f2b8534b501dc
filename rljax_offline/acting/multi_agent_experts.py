"""Scripted multi-agent policies for mpe2's cooperative envs, and their epsilon ladders, as
policies for `MultiAgentEnvRunner` (`(obs [N, ...], key) -> (actions [N], extra)`).

`simple_spread_v3` (N agents, N landmarks; an agent's observation is `[velocity (2), position
(2), landmarks relative (2N), other agents relative (2(N-1)), communication (2(N-1))]`, so N is
the observation size / 6): each agent, from its own observation alone, takes the assignment of
agents to landmarks with the least summed distance (all N! permutations, N <= 6; ties go to the
first permutation in `itertools.permutations` order) and heads for its own landmark, aiming at
`landmark - 0.5 * velocity` (the velocity term brakes before arrival). Discrete actions
(`0` no-op, `1`/`2` -x/+x, `3`/`4` -y/+y) push along the larger axis of that aim, no-op
within 0.02 of it; continuous actions (mpe2's `Box(0, 1, (5,))`, force `(a2 - a1, a4 - a3)`)
push proportionally, `clip(gain * aim, -1, 1)` split into its positive and negative parts.

`simple_speaker_listener_v4`: the speaker says the goal landmark (the largest channel of the
goal colour it observes: landmark k's colour is largest in channel k); the listener heads for
the landmark named by the largest channel of the message it hears (the no-op before it hears
one), by the same rule as simple_spread's agents. With continuous actions the speaker's
message is the goal's one-hot (mpe2 passes the three values through) and the listener pushes
proportionally; the noise of `NoisyScripted` goes on both.

Behaviour policies, each recording the exact `action_logp` of the action taken:

* `EpsilonScripted` (Discrete): with probability `epsilon` a uniform action, else the scripted
  one, independently per agent and step: `p(a) = epsilon / n + (1 - epsilon) [a == scripted]`.
  `epsilon=1` is the uniform random policy, `epsilon=0` the scripted one (`logp` 0).
* `NoisyScripted` (Box): with probability `epsilon` a uniform action on the box, else the
  scripted action plus Gaussian noise of standard deviation `sigma` *truncated to the box*
  (resampled, not clipped, so the density has no point masses): `p(a) = epsilon / volume +
  (1 - epsilon) prod_i N(a_i; mu_i, sigma) / Z_i` with `Z_i` the Gaussian's mass inside
  `[low_i, high_i]`.

Both are jitted, work on any batch of observations (every agent of every env copy in one
call) and have `log_prob(obs, actions)` for off-policy evaluation of the same policy on other
data. Their draws come from the runner's key only: same seed, same data.

Example:
    >>> import numpy as np
    >>> from rljax_offline.acting.multi_agent_experts import spread_heuristic
    >>> obs = np.zeros((1, 18), np.float32)
    >>> obs[0, 4:10] = [0.5, 0.1, -1.0, 0.0, 0.0, -1.0]   # landmark 0 is nearest to this agent
    >>> obs[0, 10:14] = [-1.0, 0.1, 0.1, -1.0]             # the others sit at landmarks 1 and 2
    >>> spread_heuristic(obs).tolist()                      # push +x, toward (0.5, 0.1)
    [2]
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from rljax_offline.errors import BehaviorError

__all__ = [
    "EpsilonScripted",
    "NoisyScripted",
    "listener_heuristic",
    "listener_heuristic_continuous",
    "speaker_heuristic",
    "speaker_heuristic_continuous",
    "spread_aim",
    "spread_heuristic",
    "spread_heuristic_continuous",
]

NO_OP_RADIUS = 0.02
BRAKE = 0.5
MAX_SPREAD_AGENTS = 6


def _permutations(n: int) -> np.ndarray:
    if not 1 <= n <= MAX_SPREAD_AGENTS:
        raise BehaviorError(f"the simple_spread heuristic tries all N! assignments and takes "
                            f"1 to {MAX_SPREAD_AGENTS} agents, got an observation for {n}")
    return np.asarray(list(itertools.permutations(range(n))), np.int32)


def spread_aim(obs: jax.Array) -> jax.Array:
    """Where each agent of `simple_spread` heads, relative to itself: `[B, 2]`.

    Args:
      obs: agents' observations `[B, 6N]` (one row per agent; mpe2's full observability).
    """
    obs = jnp.asarray(obs, jnp.float32)
    if obs.ndim != 2 or obs.shape[1] % 6:
        raise BehaviorError(f"simple_spread observations are [B, 6N] (N agents), got shape "
                            f"{tuple(obs.shape)}")
    n = obs.shape[1] // 6
    perms = jnp.asarray(_permutations(n))                          # [K, N]
    vel = obs[:, 0:2]
    landmarks = obs[:, 4:4 + 2 * n].reshape(-1, n, 2)              # relative to the agent
    others = obs[:, 4 + 2 * n:4 + 2 * n + 2 * (n - 1)].reshape(-1, n - 1, 2)
    agents = jnp.concatenate([jnp.zeros_like(others[:, :1]), others], axis=1)  # self first
    dist = jnp.linalg.norm(agents[:, :, None, :] - landmarks[:, None, :, :], axis=-1)
    # cost of permutation k: sum_i dist[b, i, perms[k, i]]
    cost = dist[:, jnp.arange(n)[None, :], perms].sum(-1)          # [B, K]
    mine = perms[jnp.argmin(cost, axis=1), 0]                      # [B]
    target = jnp.take_along_axis(landmarks, mine[:, None, None], axis=1)[:, 0]
    return target - BRAKE * vel


def _axis_action(aim: jax.Array) -> jax.Array:
    """mpe2's discrete move (0 none, 1 -x, 2 +x, 3 -y, 4 +y) along the larger axis of `aim`."""
    x, y = aim[:, 0], aim[:, 1]
    along_x = jnp.abs(x) > jnp.abs(y)
    move = jnp.where(along_x, jnp.where(x > 0, 2, 1), jnp.where(y > 0, 4, 3))
    return jnp.where(jnp.linalg.norm(aim, axis=1) < NO_OP_RADIUS, 0, move).astype(jnp.int32)


@jax.jit
def spread_heuristic(obs: jax.Array) -> jax.Array:
    """The scripted discrete action of each `simple_spread` agent, `[B]` int32.

    Args:
      obs: agents' observations `[B, 6N]`.
    """
    return _axis_action(spread_aim(obs))


def _force_action(aim: jax.Array, gain: float) -> jax.Array:
    """mpe2's continuous move `[B, 5]` (`a2 - a1` the x force, `a4 - a3` the y force, `a0`
    unused): `clip(gain * aim, -1, 1)` split into positive and negative parts."""
    u = jnp.clip(gain * aim, -1.0, 1.0)
    pos, neg = jnp.maximum(u, 0.0), jnp.maximum(-u, 0.0)
    return jnp.stack([jnp.zeros_like(u[:, 0]), neg[:, 0], pos[:, 0], neg[:, 1], pos[:, 1]],
                     axis=1)


def spread_heuristic_continuous(obs: jax.Array, gain: float = 4.0) -> jax.Array:
    """The scripted continuous action of each `simple_spread` agent, `[B, 5]` in `[0, 1]`.

    Args:
      obs: agents' observations `[B, 6N]`.
      gain: force per unit of distance to the aim, before clipping to [-1, 1].
    """
    return _force_action(spread_aim(obs), gain)


@jax.jit
def speaker_heuristic(obs: jax.Array) -> jax.Array:
    """The speaker of `simple_speaker_listener` names the goal landmark: the largest channel
    of the goal colour it observes, `[B]` int32 (its Discrete(3) message).

    Args:
      obs: speakers' observations `[B, 3]` (the goal colour).
    """
    return jnp.argmax(jnp.asarray(obs), axis=1).astype(jnp.int32)


def _listener_aim(obs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The listener's aim `[B, 2]` at the landmark its message names, and whether it has
    heard one `[B]`."""
    obs = jnp.asarray(obs, jnp.float32)
    message = obs[:, 8:11]
    goal = jnp.argmax(message, axis=1)
    landmarks = obs[:, 2:8].reshape(-1, 3, 2)
    target = jnp.take_along_axis(landmarks, goal[:, None, None], axis=1)[:, 0]
    return target - BRAKE * obs[:, 0:2], jnp.max(message, axis=1) > 0


@jax.jit
def listener_heuristic(obs: jax.Array) -> jax.Array:
    """The listener of `simple_speaker_listener` heads for the landmark named by the largest
    channel of the message it hears (no-op before any message), `[B]` int32.

    Args:
      obs: listeners' observations `[B, 11]`: velocity (2), 3 landmarks relative (6),
        message (3).
    """
    aim, heard = _listener_aim(obs)
    return jnp.where(heard, _axis_action(aim), 0).astype(jnp.int32)


def speaker_heuristic_continuous(obs: jax.Array) -> jax.Array:
    """The continuous speaker's message: the one-hot of the goal landmark, `[B, 3]`.

    Args:
      obs: speakers' observations `[B, 3]` (the goal colour).
    """
    return jax.nn.one_hot(speaker_heuristic(obs), 3)


def listener_heuristic_continuous(obs: jax.Array, gain: float = 4.0) -> jax.Array:
    """The continuous listener's force toward the landmark its message names (none before a
    message), `[B, 5]` in `[0, 1]`.

    Args:
      obs: listeners' observations `[B, 11]`.
      gain: force per unit of distance to the aim, before clipping to [-1, 1].
    """
    aim, heard = _listener_aim(obs)
    return _force_action(jnp.where(heard[:, None], aim, 0.0), gain)


def _check_probability(name: str, p: float) -> float:
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise BehaviorError(f"{name} must be a probability in [0, 1], got {p}")
    return p


class EpsilonScripted:
    """A scripted Discrete policy with epsilon-uniform actions (see the module docstring).

    Args:
      scripted: `obs [B, ...] -> actions [B]` (jax-traceable), the policy's greedy actions.
      num_actions: the size of the Discrete action space.
      epsilon: the probability of a uniform action, per agent and step.
    """

    def __init__(self, scripted: Callable, num_actions: int, epsilon: float):
        if int(num_actions) < 1:
            raise BehaviorError(f"num_actions must be >= 1, got {num_actions}")
        self.scripted, self.num_actions = scripted, int(num_actions)
        self.epsilon = _check_probability("epsilon", epsilon)
        self._act = jax.jit(self._sample)
        self.log_prob = jax.jit(self._log_prob)

    def _probs(self, obs: jax.Array) -> jax.Array:
        greedy = jax.nn.one_hot(self.scripted(obs), self.num_actions)
        return self.epsilon / self.num_actions + (1.0 - self.epsilon) * greedy

    def _log_prob(self, obs: jax.Array, actions: jax.Array) -> jax.Array:
        """`log p(actions | obs)`, `[B]`."""
        probs = self._probs(obs)
        p = jnp.take_along_axis(probs, jnp.asarray(actions, jnp.int32)[:, None], axis=1)[:, 0]
        return jnp.log(p)

    def _sample(self, obs: jax.Array, key: jax.Array):
        k_explore, k_action = jax.random.split(key)
        b = obs.shape[0]
        explore = jax.random.uniform(k_explore, (b,)) < self.epsilon
        uniform = jax.random.randint(k_action, (b,), 0, self.num_actions)
        actions = jnp.where(explore, uniform, self.scripted(obs)).astype(jnp.int32)
        return actions, {"action_logp": self._log_prob(obs, actions)}

    def __call__(self, obs, key):
        """`(actions [B] int32, {"action_logp": [B]})` for the observations `obs [B, ...]`."""
        return self._act(jnp.asarray(obs, jnp.float32), key)


class NoisyScripted:
    """A scripted Box policy with truncated Gaussian noise and epsilon-uniform actions (see the
    module docstring).

    Args:
      scripted: `obs [B, ...] -> actions [B, D]` (jax-traceable), inside `[low, high]`.
      low: the box's lower bounds (a number or `[D]`).
      high: the box's upper bounds.
      epsilon: the probability of a uniform action, per agent and step.
      sigma: the noise's standard deviation (before truncation), > 0.
    """

    def __init__(self, scripted: Callable, low, high, epsilon: float, sigma: float = 0.1):
        self.low = np.asarray(low, np.float32)
        self.high = np.asarray(high, np.float32)
        if not np.all(np.isfinite(self.low) & np.isfinite(self.high) & (self.high > self.low)):
            raise BehaviorError(f"NoisyScripted needs a bounded box, got low {self.low}, "
                                f"high {self.high}")
        if not float(sigma) > 0.0:
            raise BehaviorError(f"sigma must be > 0, got {sigma}")
        self.scripted, self.sigma = scripted, float(sigma)
        self.epsilon = _check_probability("epsilon", epsilon)
        self._log_volume = float(np.sum(np.log(self.high.astype(np.float64)
                                               - self.low.astype(np.float64))))
        self._act = jax.jit(self._sample)
        self.log_prob = jax.jit(self._log_prob)

    def _mean(self, obs: jax.Array) -> jax.Array:
        return jnp.clip(self.scripted(obs), self.low, self.high)

    def _log_prob(self, obs: jax.Array, actions: jax.Array) -> jax.Array:
        """`log p(actions | obs)` (a density), `[B]`."""
        mu, s = self._mean(obs), self.sigma
        lo, hi = (self.low - mu) / s, (self.high - mu) / s
        z = (jnp.asarray(actions, jnp.float32) - mu) / s
        log_mass = jnp.log(jax.scipy.special.ndtr(hi) - jax.scipy.special.ndtr(lo))
        log_tn = jnp.sum(jax.scipy.stats.norm.logpdf(z) - math.log(s) - log_mass, axis=1)
        # log(eps / volume + (1 - eps) tn); log(0) = -inf drops a term at eps 0 or 1
        with np.errstate(divide="ignore"):
            log_eps, log_rest = np.log(self.epsilon), np.log(1.0 - self.epsilon)
        return jnp.logaddexp(log_eps - self._log_volume, log_rest + log_tn)

    def _sample(self, obs: jax.Array, key: jax.Array):
        k_explore, k_uniform, k_noise = jax.random.split(key, 3)
        mu, s = self._mean(obs), self.sigma
        shape = mu.shape
        z = jax.random.truncated_normal(k_noise, (self.low - mu) / s, (self.high - mu) / s,
                                        shape)
        noisy = jnp.clip(mu + s * z, self.low, self.high)  # rounding only
        uniform = self.low + jax.random.uniform(k_uniform, shape) * (self.high - self.low)
        explore = jax.random.uniform(k_explore, shape[:1]) < self.epsilon
        actions = jnp.where(explore[:, None], uniform, noisy)
        return actions, {"action_logp": self._log_prob(obs, actions)}

    def __call__(self, obs, key):
        """`(actions [B, D] float32, {"action_logp": [B]})` for the observations `obs`."""
        return self._act(jnp.asarray(obs, jnp.float32), key)
