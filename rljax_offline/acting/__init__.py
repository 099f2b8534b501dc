"""Acting in gymnasium envs: the pure on-device actor (which owns the observation window), the
one actor protocol the `EnvRunner` that steps vector envs speaks, behaviour policies and
recording to Parquet.

`__all__` is what users and algorithm authors may import from here: the actor
(`make_actor`, `ActorPolicy`, `actor_for`), the protocol and its adapters, the env runners
(single- and multi-agent), evaluation, recording (`record_expert`, `record_policy`,
`EpisodeOutput`), behaviour mixes and the shipped scripted experts. Each name loads its
module on first use, so importing one submodule does not load the others."""

import importlib

# public name -> the submodule that defines it
_LAZY = {
    "Actor": "actor", "ActorState": "actor", "ActorPolicy": "actor", "make_actor": "actor",
    "actor_for": "actor",
    "ActorProtocol": "protocol", "CallableActor": "protocol", "as_actor": "protocol",
    "EnvRunner": "env_runner", "make_vector_env": "env_runner", "record_expert": "env_runner",
    "Evaluator": "evaluator", "EpisodeOutput": "episode_output",
    "record_policy": "recording", "check_policy_spaces": "recording",
    "Behavior": "behavior", "BehaviorPolicy": "behavior", "parse_behavior": "behavior",
    "parse_mix": "behavior",
    "cartpole_expert": "experts", "pendulum_expert": "experts", "expert_for": "experts",
    "MultiAgentEnvRunner": "multi_agent_runner", "random_policy": "multi_agent_runner",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
