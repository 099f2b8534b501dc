"""Behaviour policies for recording mixed-quality offline data sets.

Real logs mix operators of varying skill, exploration noise and old policies. A `Behavior` is
one such level, built from a base policy (a scripted expert) by perturbing its actions:

* `epsilon`: with this probability the action is drawn uniformly from the whole action space
  (RLlib's epsilon-greedy semantics: the draw may return the base action itself);
* `flip_prob` (Discrete only): with this probability the base action is replaced by one of the
  *other* actions, uniformly (with two actions: the opposite one);
* `action_noise` (Box only): Gaussian noise of this standard deviation on the base action,
  clipped to the space's bounds;
* `random`: ignore the base policy, uniform actions.

Behaviours are written as short specs: `expert`, `random`, `eps0.3`, `flip0.4`, `noise0.5`,
joined with `+` to combine (`flip0.2+eps0.1`: flip first, then epsilon). A mix gives each
behaviour a weight: `"expert:0.1,random:0.6,flip0.4:0.3"`; every episode draws its behaviour
from the weights when it starts and keeps it to its end.

Each recorded episode carries its behaviour in `custom_data["behavior"]` (kept by episode rows,
RLlib's state dict) and, per step, `extra_model_outputs["action_perturbed"]` (1 where the
behaviour replaced or moved the base policy's action) and `extra_model_outputs["action_logp"]`
(RLlib's column: the log-probability of the recorded action under the episode's behaviour, what
off-policy evaluation's importance weights divide by), which tabular rows keep as columns.
The base policy is deterministic: Discrete actions have probability 1 under it; Box actions a
point mass, whose density is infinite (`action_logp = +inf`: an importance weight of 0, see
`rljax_offline.ope`). Gaussian noise clipped at a bound puts the tail's mass on the bound: there
`action_logp` is the log of that mass (a mixed distribution: density inside, mass at the bounds).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np

from rljax_offline.errors import BehaviorError

_TERM = re.compile(r"^(expert|random|eps|flip|noise)([0-9]*\.?[0-9]*(?:e-?[0-9]+)?)$")


@dataclass(frozen=True)
class Behavior:
    """One behaviour level: a base policy perturbed as the module docstring describes.

    Attributes:
      epsilon: the probability of a uniformly random action.
      flip_prob: the probability of replacing a Discrete action by another one.
      action_noise: the standard deviation of Gaussian noise on Box actions.
      random: ignore the base policy; uniform actions.

    Raises:
      BehaviorError: a probability outside [0, 1] or negative noise.
    """

    epsilon: float = 0.0
    flip_prob: float = 0.0
    action_noise: float = 0.0
    random: bool = False

    def __post_init__(self):
        for name in ("epsilon", "flip_prob"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise BehaviorError(f"{name} must be a probability in [0, 1], got {p}")
        if self.action_noise < 0.0:
            raise BehaviorError(f"action_noise must be >= 0, got {self.action_noise}")

    @property
    def name(self) -> str:
        """The canonical spec (`parse_behavior(b.name) == b`)."""
        if self.random:
            return "random"
        parts = [f"{tag}{_num(v)}" for tag, v in (("flip", self.flip_prob),
                                                   ("noise", self.action_noise),
                                                   ("eps", self.epsilon)) if v]
        return "+".join(parts) or "expert"

    def check_space(self, space: gym.Space) -> None:
        """A clear error where the behaviour does not apply to `space`."""
        discrete = isinstance(space, gym.spaces.Discrete)
        if not discrete and not isinstance(space, gym.spaces.Box):
            raise BehaviorError(f"behaviours support Discrete and Box action spaces, got {space}")
        if self.flip_prob and not discrete:
            raise BehaviorError(f"{self.name}: action flips need a Discrete action space, got "
                                f"{space}; use action noise (noiseSTD) for Box")
        if self.flip_prob and space.n < 2:
            raise BehaviorError(f"{self.name}: flipping needs at least 2 actions, got {space}")
        if self.action_noise and discrete:
            raise BehaviorError(f"{self.name}: Gaussian action noise needs a Box action space, "
                                f"got {space}; use flips (flipP) or epsilon (epsP)")

    def perturb(self, actions: np.ndarray, space: gym.Space, rng: np.random.Generator
                ) -> tuple[np.ndarray, np.ndarray]:
        """(perturbed actions, per-row 0/1 flag: the action differs from the base action)."""
        n = len(actions)
        out = actions.copy()
        if self.random:
            out = _uniform(space, n, rng)
        else:
            if self.flip_prob:
                flip = rng.random(n) < self.flip_prob
                # One of the n-1 other actions, uniformly: shift by 1..n-1 modulo n.
                shift = rng.integers(1, space.n, n)
                out = np.where(flip, (out - space.start + shift) % space.n + space.start, out)
            if self.action_noise:
                noise = rng.normal(0.0, self.action_noise, out.shape)
                out = np.clip(out + noise, space.low, space.high).astype(space.dtype)
            if self.epsilon:
                explore = rng.random(n) < self.epsilon
                mask = explore.reshape((n,) + (1,) * (out.ndim - 1))
                out = np.where(mask, _uniform(space, n, rng), out)
        changed = (out != actions).reshape(n, -1).any(axis=1)
        return out.astype(actions.dtype), changed.astype(np.int8)

    def logp(self, base: np.ndarray, actions: np.ndarray, space: gym.Space) -> np.ndarray:
        """Per-row log-probability (Discrete) or log-density (Box) of `actions` under this
        behaviour, given the base policy's actions `base` (see the module docstring)."""
        n = len(actions)
        if isinstance(space, gym.spaces.Discrete):
            uniform = np.full(n, 1.0 / space.n)
            if self.random:
                return np.log(uniform)
            same = np.asarray(actions).reshape(n) == np.asarray(base).reshape(n)
            flip = self.flip_prob
            p = np.where(same, 1.0 - flip, flip / max(space.n - 1, 1))
            p = (1.0 - self.epsilon) * p + self.epsilon * uniform
            with np.errstate(divide="ignore"):
                return np.log(p)
        low = np.broadcast_to(np.asarray(space.low, np.float64), space.shape).reshape(-1)
        high = np.broadcast_to(np.asarray(space.high, np.float64), space.shape).reshape(-1)
        a = np.asarray(actions, np.float64).reshape(n, -1)
        b = np.asarray(base, np.float64).reshape(n, -1)
        log_uniform = -np.sum(np.log(high - low))
        if self.random:
            return np.full(n, log_uniform)
        if self.action_noise:
            s = self.action_noise
            dens = -0.5 * ((a - b) / s) ** 2 - np.log(s * np.sqrt(2.0 * np.pi))
            at_low, at_high = a <= low, a >= high
            dens = np.where(at_low, np.log(np.maximum(_normal_cdf((low - b) / s), 1e-300)),
                            dens)
            dens = np.where(at_high, np.log(np.maximum(_normal_cdf((b - high) / s), 1e-300)),
                            dens)
            base_logp = dens.sum(axis=1)
        else:  # a point mass at the base action: infinite density there, 0 elsewhere
            same = np.all(a == b, axis=1)
            base_logp = np.where(same, np.inf, -np.inf)
        if not self.epsilon:
            return base_logp
        with np.errstate(over="ignore"):
            return np.logaddexp(np.log1p(-self.epsilon) + base_logp,
                                np.log(self.epsilon) + log_uniform)


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    """The standard normal CDF (numpy has no erf; math.erf per element)."""
    return 0.5 * (1.0 + np.vectorize(math.erf)(np.asarray(x, np.float64) / np.sqrt(2.0)))


def _num(x: float) -> str:
    return f"{x:g}"


def _uniform(space: gym.Space, n: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(space, gym.spaces.Discrete):
        return rng.integers(space.start, space.start + space.n, n).astype(np.int64)
    return rng.uniform(space.low, space.high, (n,) + space.shape).astype(space.dtype)


def parse_behavior(spec: str) -> Behavior:
    """`"flip0.2+eps0.1"` -> `Behavior(flip_prob=0.2, epsilon=0.1)`; see the module docstring.

    Args:
      spec: the behaviour spec (`expert`, `random`, `eps0.3`, `flip0.4`, `noise0.5`, joined
        with `+`).

    Returns:
      The `Behavior`.

    Raises:
      BehaviorError: a malformed spec.

    Example:
        >>> parse_behavior("flip0.2+eps0.1")
        Behavior(epsilon=0.1, flip_prob=0.2, action_noise=0.0, random=False)
    """
    kw: dict = {}
    terms = [t.strip() for t in str(spec).split("+")]
    for term in terms:
        m = _TERM.match(term)
        if not m or (m.group(1) in ("expert", "random")) != (m.group(2) == ""):
            raise BehaviorError(
                f"bad behaviour {term!r} in {spec!r}: expected expert, random, epsP, flipP or "
                "noiseSTD (e.g. eps0.3, flip0.4, noise0.5), joined with '+'")
        tag, value = m.group(1), m.group(2)
        if tag == "random":
            kw["random"] = True
        elif tag != "expert":
            key = {"eps": "epsilon", "flip": "flip_prob", "noise": "action_noise"}[tag]
            if key in kw:
                raise BehaviorError(f"{tag} given twice in behaviour {spec!r}")
            kw[key] = float(value)
    if kw.get("random") and len(terms) > 1:
        raise BehaviorError(f"'random' cannot be combined with other terms: {spec!r}")
    return Behavior(**kw)


def parse_mix(spec: str) -> list[tuple[Behavior, float]]:
    """`"expert:0.1,random:0.6,flip0.4:0.3"` -> behaviours with weights normalised to sum 1.

    A behaviour without `:weight` gets weight 1.

    Args:
      spec: comma-separated `behaviour:weight` entries.

    Returns:
      `(Behavior, weight)` pairs.

    Raises:
      BehaviorError: a malformed entry or a weight that is not positive.
    """
    items = []
    for part in str(spec).split(","):
        part = part.strip()
        if not part:
            continue
        name, _, weight = part.partition(":")
        try:
            w = float(weight) if weight else 1.0
        except ValueError:
            raise BehaviorError(f"bad weight {weight!r} for {name!r} in mix {spec!r}: expected "
                                "a number, e.g. 'expert:0.1,random:0.9'") from None
        if not (w > 0 and np.isfinite(w)):
            raise BehaviorError(f"weight of {name!r} in mix {spec!r} must be > 0, got {weight}")
        items.append((parse_behavior(name), w))
    if not items:
        raise BehaviorError(f"empty behaviour mix {spec!r}")
    total = sum(w for _, w in items)
    return [(b, w / total) for b, w in items]


class BehaviorPolicy:
    """A recording policy: each episode follows one behaviour of `mix`, drawn when it starts.

    An actor of `acting.protocol` (what `EnvRunner` drives): `reset` and `observe` tell it
    which envs start an episode (all of them, the `fresh` ones), each draws its behaviour
    there, and `custom_data(env)` tags that episode with it.

    Args:
      base: the policy being perturbed, `obs_batch -> actions` (a scripted expert).
      mix: behaviours with weights (`parse_mix`), or one `Behavior`.
      action_space: the env's single action space.
      seed: seeds the behaviour draws and the perturbations.
    """

    def __init__(self, base: Callable, mix: Sequence[tuple[Behavior, float]] | Behavior,
                 action_space: gym.Space, seed: int = 0):
        if isinstance(mix, Behavior):
            mix = [(mix, 1.0)]
        self.base, self.action_space = base, action_space
        self.behaviors = [b for b, _ in mix]
        self.weights = np.asarray([w for _, w in mix], float)
        self.weights = self.weights / self.weights.sum()
        for b in self.behaviors:
            b.check_space(action_space)
        self._rng = np.random.default_rng(seed)
        self._obs = None
        self._current: list[int] = []

    def _draw(self, envs) -> None:
        for i in envs:
            self._current[i] = int(self._rng.choice(len(self.behaviors), p=self.weights))

    def reset(self, obs, seed: int) -> None:
        del seed  # draws come from our own generator, seeded once: reproducible recordings
        self._obs = np.asarray(obs)
        self._current = [0] * len(self._obs)
        self._draw(range(len(self._obs)))

    def observe(self, rewards, next_obs, fresh) -> None:
        del rewards
        self._obs = np.asarray(next_obs)
        self._draw(np.flatnonzero(np.asarray(fresh, bool)))

    def running(self, num_envs: int) -> bool:
        return self._obs is not None and len(self._obs) == num_envs

    def custom_data(self, env: int) -> dict:
        return {"behavior": self.behaviors[self._current[env]].name}

    def select(self) -> tuple[np.ndarray, dict]:
        n = len(self._obs)
        base = np.asarray(self.base(self._obs))
        if isinstance(self.action_space, gym.spaces.Discrete):
            base = base.astype(np.int64).reshape(n)
        else:
            base = base.reshape((n,) + self.action_space.shape).astype(self.action_space.dtype)
        actions, changed = base.copy(), np.zeros(n, np.int8)
        current = np.asarray(self._current)
        logp = np.zeros(n, np.float32)
        for k in np.unique(current):
            rows = np.flatnonzero(current == k)
            behavior = self.behaviors[k]
            actions[rows], changed[rows] = behavior.perturb(base[rows], self.action_space,
                                                            self._rng)
            logp[rows] = behavior.logp(base[rows], actions[rows], self.action_space)
        return actions, {"action_perturbed": changed, "action_logp": logp}
