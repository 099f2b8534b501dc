"""`off_policy_estimation_methods`: RLlib's dict of name -> `{"type": ..., **options}`,
checked and turned into `Method`s.

Types: `"is"`, `"wis"` (trajectory-wise importance sampling, ordinary and weighted),
`"pdis"`, `"wpdis"` (per-decision), `"fqe"` / `"dm"` (the direct method over a fitted Q
evaluation), `"dr"` (doubly robust; `weighted=True`, the default, is the weighted per-decision
DR, False is Jiang & Li's). RLlib's class names are accepted as types, as strings or as the
classes below, with RLlib's semantics: `ImportanceSampling` (RLlib's is per-decision: "pdis"),
`WeightedImportanceSampling` ("wpdis"), `DirectMethod` ("dm"), `DoublyRobust` ("dr",
`weighted=False` as RLlib's). FQE's settings (`FQEOptions`) go flat in the entry or,
as RLlib wrote them, under `q_model_config`.

Example:
    >>> config.evaluation(off_policy_estimation_methods={
    ...     "is": {"type": "is"}, "wis": {"type": "wis"}, "pdis": {"type": "pdis"},
    ...     "fqe": {"type": "fqe", "num_updates": 3000}, "dr": {"type": "dr"}},
    ...     ope_split=0.1)
"""

from __future__ import annotations

from typing import NamedTuple

from rljax_offline.errors import ConfigError


class FQEOptions(NamedTuple):
    """FQE's settings: the keys of an `"fqe"` / `"dm"` / `"dr"` entry of
    `off_policy_estimation_methods`, besides `type`.

    Attributes:
      num_updates: gradient updates of the fit.
      train_batch_size: rows per update (rounded up to a multiple of the devices).
      lr: Adam's learning rate.
      target_update_period: updates between hard copies of the target network (one
        Bellman backup each).
      model_config: the Q network's RLlib model config.
      num_action_samples: Box actions drawn from the target policy at each next
        observation to estimate its value (Discrete uses exact probabilities).
      num_devices: local devices the fit runs on (`"all"` or a number).
      update_mode: `DataParallel`'s mode (`"shard_map"`, `"pmap"` or `"jit"`).
      seed: the fit's seed (initialisation, sampling, bootstrap).
      bootstrap_heads: Q networks fitted together, each on its own bootstrap resample of
        the episodes, whose spread widens the intervals of `fqe`/`dm` and `dr` by the
        model's error. The default, 1, is one plain fit with intervals over the episodes
        only: more heads did not cover the truth more often (the misses are biases every
        head shares) and cost a fit per head, see the OPE guide's benchmark; FQE's
        convergence bound (`ope.fqe.convergence_bound`) covers those biases with no extra
        fit.
    """

    num_updates: int = 5000
    train_batch_size: int = 256
    lr: float = 1e-3
    target_update_period: int = 100
    model_config: dict = {"fcnet_hiddens": [128, 128]}  # noqa: RUF012
    num_action_samples: int = 10
    num_devices: int | str = "all"
    update_mode: str = "shard_map"
    seed: int = 0
    bootstrap_heads: int = 1


class ImportanceSampling:
    """RLlib's step-wise importance sampling: type "pdis"."""

    ope_type, defaults = "pdis", {}


class WeightedImportanceSampling:
    """RLlib's weighted step-wise importance sampling: type "wpdis"."""

    ope_type, defaults = "wpdis", {}


class DirectMethod:
    """RLlib's direct method over an FQE Q model: type "dm"."""

    ope_type, defaults = "dm", {}


class DoublyRobust:
    """RLlib's doubly robust estimator (Jiang & Li's recursion): type "dr", weighted=False."""

    ope_type, defaults = "dr", {"weighted": False}


_CLASSES = {c.__name__: c for c in (ImportanceSampling, WeightedImportanceSampling,
                                    DirectMethod, DoublyRobust)}
TYPES = ("is", "wis", "pdis", "wpdis", "dm", "fqe", "dr")
NEEDS_WEIGHTS = frozenset({"is", "wis", "pdis", "wpdis", "dr"})
NEEDS_Q = frozenset({"dm", "dr"})


class Method(NamedTuple):
    """One estimator to run: its kind (`is`, `wis`, `pdis`, `wpdis`, `dm`, `dr`), DR's
    weighting and the FQE settings (dm and dr).

    Attributes:
      kind: `is`, `wis`, `pdis`, `wpdis`, `dm` or `dr`.
      weighted: DR's weighting (the weighted per-decision DR when True).
      fqe: the FQE settings (used by `dm` and `dr`).
    """

    kind: str
    weighted: bool = True
    fqe: FQEOptions = FQEOptions()

    @property
    def needs_weights(self) -> bool:
        return self.kind in NEEDS_WEIGHTS

    @property
    def needs_q(self) -> bool:
        return self.kind in NEEDS_Q


def _type_of(name: str, entry: dict) -> tuple[str, dict]:
    t = entry.get("type", name)
    if isinstance(t, type) and t.__name__ in _CLASSES:
        t = t.__name__
    if isinstance(t, str) and t in _CLASSES:
        return _CLASSES[t].ope_type, dict(_CLASSES[t].defaults)
    if isinstance(t, str) and t.lower() in TYPES:
        t = t.lower()
        return ("dm" if t == "fqe" else t), {}
    raise ConfigError(f"off_policy_estimation_methods[{name!r}]: type must be one of "
                      f"{list(TYPES)} or {sorted(_CLASSES)}, got {t!r}")


def as_data(methods: dict | None) -> dict | None:
    """The methods with class types as their names (RLlib's names mean the same as strings),
    so a config holding them saves to JSON and restores from a checkpoint.

    Args:
      methods: `off_policy_estimation_methods` as the user gave it (or None).
    """
    if not isinstance(methods, dict):
        return methods
    return {name: ({**entry, "type": entry["type"].__name__}
                   if isinstance(entry, dict) and isinstance(entry.get("type"), type)
                   else entry)
            for name, entry in methods.items()}


def parse_methods(methods: dict | list | tuple | None) -> dict[str, Method]:
    """`{name: Method}` from RLlib's dict (or a list of type names, each its own name).

    Every entry is checked here, before any data is read, so a typo in a type or an FQE key
    fails at once and names the entry.

    Args:
      methods: RLlib's `off_policy_estimation_methods` (name -> `{"type": ..., **options}`,
        or name -> type), a list of types, or None (no estimator).

    Returns:
      name -> `Method`.

    Raises:
      ConfigError: an unknown type or key, `weighted` on an estimator other than `dr`, or
        `bootstrap_heads` that is not an integer >= 1.

    Example:
        >>> sorted(parse_methods(["wis", "fqe"]).items())[0]
        ('fqe', Method(kind='dm', ...))
    """
    if methods is None:
        return {}
    if isinstance(methods, (list, tuple)):
        methods = {str(m): {"type": m} for m in methods}
    if not isinstance(methods, dict):
        raise ConfigError("off_policy_estimation_methods must be a dict name -> {'type': ...}"
                          f" or a list of types, got {type(methods).__name__}")
    out = {}
    fqe_keys = set(FQEOptions._fields)
    for name, entry in methods.items():
        entry = {"type": entry} if not isinstance(entry, dict) else dict(entry)
        kind, defaults = _type_of(name, entry)
        entry = {**defaults, **{k: v for k, v in entry.items() if k != "type"}}
        entry = {**entry.pop("q_model_config", {}), **entry}
        if "weighted" in entry and kind != "dr":
            raise ConfigError(f"off_policy_estimation_methods[{name!r}] ({kind}): 'weighted' "
                              "is DR's option; use the type wis or wpdis for weighted IS")
        weighted = bool(entry.pop("weighted", True))
        unknown = sorted(set(entry) - fqe_keys)
        if unknown or (entry and kind not in NEEDS_Q):
            allowed = sorted(fqe_keys | {"weighted"}) if kind in NEEDS_Q else []
            raise ConfigError(f"off_policy_estimation_methods[{name!r}] ({kind}): unknown "
                              f"key(s) {unknown or sorted(entry)}; allowed: {allowed}")
        heads = entry.get("bootstrap_heads", 1)
        if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
            raise ConfigError(f"off_policy_estimation_methods[{name!r}] ({kind}): "
                              f"bootstrap_heads must be an integer >= 1, got {heads!r}")
        out[str(name)] = Method(kind, weighted, FQEOptions(**entry))
    return out
