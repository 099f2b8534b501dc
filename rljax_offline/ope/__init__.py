"""Off-policy evaluation: a policy's value estimated from logged data alone.

Estimators with RLlib's names and metrics (`ope.estimators`, `ope.methods`): importance
sampling trajectory-wise (`is`, `wis`) and per decision (`pdis`, `wpdis`), the direct method
over a fitted Q evaluation trained by the learner core (`fqe` / `dm`, `ope.fqe`) and doubly
robust (`dr`). Each reports `v_behavior`, `v_target`, `v_gain`, their standard deviations, a
bootstrap interval on `v_target` and the importance weights' effective sample size.

Public names load on first use (start-up cost). `ope.estimate` takes a checkpoint folder (its
`TrainedPolicy` is loaded, no algorithm is built), a `TrainedPolicy`, an `Algorithm` or a
policy function; `evaluate_policy` is the same on a `TrainedPolicy` and episodes;
`estimate_team` judges several agents' policies by the team return (`ope.multi_agent`). This package
sits below the algorithm layer: it never imports the facade (`tests/test_layers.py`).
"""

from __future__ import annotations

import importlib

_PUBLIC = {
    "estimate": "rljax_offline.ope.api",
    "load_episodes": "rljax_offline.ope.api",
    "evaluate_policy": "rljax_offline.ope.evaluation",
    "parse_methods": "rljax_offline.ope.methods",
    "ImportanceSampling": "rljax_offline.ope.methods",
    "WeightedImportanceSampling": "rljax_offline.ope.methods",
    "DirectMethod": "rljax_offline.ope.methods",
    "DoublyRobust": "rljax_offline.ope.methods",
    "FQEOptions": "rljax_offline.ope.methods",
    "fit_fqe": "rljax_offline.ope.fqe",
    "FQEFit": "rljax_offline.ope.fqe",
    "TargetPolicy": "rljax_offline.ope.target",
    "from_acting": "rljax_offline.ope.target",
    "from_function": "rljax_offline.ope.target",
    "Method": "rljax_offline.ope.methods",
    "convergence_bound": "rljax_offline.ope.fqe",
    "split": "rljax_offline.ope.data",
    "discounted_env_value": "rljax_offline.ope.env_value",
    "estimate_team": "rljax_offline.ope.multi_agent",
    "team_episodes": "rljax_offline.ope.multi_agent",
    "team_spaces": "rljax_offline.ope.multi_agent",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'rljax_offline.ope' has no attribute {name!r}")
