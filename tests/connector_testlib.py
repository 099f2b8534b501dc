"""Random episodes and plain-numpy, per-episode references of RLlib's connector semantics,
shared by the tests/test_connectors_*.py files."""

import gymnasium as gym
import jax
import numpy as np

from rljax_offline import Episode, EpisodeBatch
from rljax_offline.connectors import Context

OBS = gym.spaces.Box(-10, 10, (3,), np.float32)
ACT = gym.spaces.Discrete(3)
DICT_OBS = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,), np.float32),
                            "mode": gym.spaces.Discrete(4)})


def random_episodes(n=5, seed=0, max_len=12, lookback=True, obs_space=OBS, min_len=1):
    """`n` episodes of random lengths, lookback buffers of 0..2 steps, mixed end flags."""
    rng = np.random.default_rng(seed)
    eps = []
    for i in range(n):
        T = int(rng.integers(min_len, max_len))
        L = int(rng.integers(0, 3)) if lookback else 0
        if isinstance(obs_space, gym.spaces.Dict):
            obs = {"pos": rng.normal(size=(T + L + 1, 2)).astype(np.float32),
                   "mode": rng.integers(0, 4, T + L + 1)}
        else:
            obs = rng.normal(size=(T + L + 1, 3)).astype(np.float32) * 2 + 1
        eps.append(Episode(observations=obs, actions=rng.integers(0, 3, T + L),
                           rewards=rng.normal(size=T + L).astype(np.float32) * 3,
                           extra_model_outputs={"action_logp": rng.normal(
                               size=T + L).astype(np.float32)},
                           terminated=bool(i % 2), truncated=not i % 2 and i % 3 == 0,
                           len_lookback_buffer=L, observation_space=obs_space,
                           action_space=ACT))
    return eps


def run_jit(pipe, spaces, episodes, ctx=None, state=None, batch=None, jit=True):
    """`jax.jit(pipe.apply)` (or, `jit=False`, `pipe.apply` eagerly) on the episodes'
    `EpisodeBatch`."""
    ctx = Context() if ctx is None else ctx
    eb = EpisodeBatch.from_episodes(episodes) if batch is None else batch
    state = pipe.init(spaces) if state is None else state
    return (jax.jit(pipe.apply) if jit else pipe.apply)(state, eb, {}, ctx)


def real_rows(batch):
    """The learner batch's rows where `loss_mask` is True, as numpy."""
    m = np.asarray(batch["loss_mask"])
    return jax.tree_util.tree_map(lambda x: np.asarray(x)[m], batch)


def learner_reference(episodes, obs_fn=lambda ep, t: ep.get_observations(t)):
    """RLlib's default learner columns, episode by episode: every observation that has an
    action, its successor, actions, rewards, flags on the last step, extra model outputs."""
    ref = {k: [] for k in ("obs", "new_obs", "actions", "rewards", "terminateds",
                           "truncateds", "action_logp")}
    for ep in episodes:
        T = len(ep)
        ref["obs"] += [obs_fn(ep, t) for t in range(T)]
        ref["new_obs"] += [obs_fn(ep, t + 1) for t in range(T)]
        ref["actions"].append(ep.get_actions())
        ref["rewards"].append(ep.get_rewards())
        last = np.arange(T) == T - 1
        ref["terminateds"].append(last & ep.is_terminated)
        ref["truncateds"].append(last & ep.is_truncated)
        ref["action_logp"].append(ep.get_extra_model_outputs("action_logp"))
    return {k: np.stack(v) if k in ("obs", "new_obs") else np.concatenate(v)
            for k, v in ref.items()}


def stacked_frames(ep, t, k):
    """RLlib's frame stacking of observation `t`: the `k` observations up to it, lookback
    included, zeros before the first available one, concatenated on the last axis."""
    return ep.get_observations(slice(t - k + 1, t + 1), neg_index_as_lookback=True,
                               fill=0.0).reshape(-1)


class NumpyMeanStd:
    """RLlib's `RunningStat` + `MeanStdFilter` in numpy, one observation pushed at a time."""

    def __init__(self, shape, clip=10.0):
        self.n, self.mean, self.s, self.clip = 0, np.zeros(shape), np.zeros(shape), clip

    def push(self, x):
        self.n += 1
        if self.n == 1:
            self.mean = np.asarray(x, np.float64).copy()
        else:
            delta = x - self.mean
            self.mean = self.mean + delta / self.n
            self.s = self.s + delta * delta * (self.n - 1) / self.n

    @property
    def std(self):
        return np.sqrt(self.s / (self.n - 1) if self.n > 1 else np.square(self.mean))

    def __call__(self, x):
        return np.clip((x - self.mean) / (self.std + 1e-6), -self.clip, self.clip)
