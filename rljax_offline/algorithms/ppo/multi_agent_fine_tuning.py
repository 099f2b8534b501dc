"""Multi-agent PPO (IPPO, several modules, MAPPO) started from a multi-agent checkpoint of
any registered algorithm: `PPOConfig().multi_agent(...).training(init_policy_from=...)`.

Each PPO module takes the policy weights of the checkpoint's module of the same id (BC,
MARWIL, PPO, IQL with a plain Gaussian: the policies PPO's own distribution reads as the
same actions; `fine_tuning.policy_refusal`), checked for the spaces and the network shapes
(one-line `PolicyMismatchError`s naming the module). The value networks start fresh: the
value warm-up that single-agent fine-tuning runs on the offline data is not built for
several modules, so `PPOConfig.build()` asks for `value_warmup_updates=0` (a one-line
`ConfigError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax

from rljax_offline.acting.recording import PolicyMismatchError, check_policy_spaces
from rljax_offline.algorithms.config import AlgorithmConfig
from rljax_offline.algorithms.fine_tuning import check_same_shapes, policy_refusal
from rljax_offline.learning.trained_policy import saved_config

__all__ = ["module_policy_starts"]

ACCEPTED = ("PPO starts from a categorical (Discrete) or plain Gaussian (Box) policy "
            "network: bc, marwil, ppo, iql (Box: actor_squashed=False)")


def module_policy_starts(path: str, modules: Mapping[str, Any], current: Mapping[str, dict],
                         config: AlgorithmConfig | None = None) -> dict[str, dict]:
    """`{module_id: policy params}` from the multi-agent checkpoint at `path`.

    Args:
      path: a multi-agent checkpoint (`MultiAgentAlgorithm.save`, or multi-agent PPO's).
      modules: this run's `{module_id: ModuleSetup}` (`multi_agent_modules.build_modules`).
      current: `{module_id: this run's params}` (the shapes the weights must have).
      config: the checkpoint's config when it held code (None: the saved one).

    Raises:
      PolicyMismatchError: a module the checkpoint lacks, other spaces, no policy network,
        another action distribution or other network shapes, naming the module.
    """
    saved = (config or saved_config(path)).build()
    try:
        saved.restore(path)
        # IPPO's one shared module (`MultiAgentPPO`) is a single-module algorithm
        theirs = ({m: saved.policy for m in [saved.module_id]} if hasattr(saved, "module_id")
                  else {m: (lambda m=m: saved.policy(m)) for m in getattr(saved, "modules", {})})
        missing = sorted(set(modules) - set(theirs))
        if missing:
            raise PolicyMismatchError(f"checkpoint {path!r} has the modules "
                                      f"{sorted(theirs)}, not {missing}: name the same "
                                      "modules in policies")
        out = {}
        for module_id, m in modules.items():
            src = theirs[module_id]()
            where = f"{path}, module {module_id!r}"
            check_policy_spaces(src.spaces, *m.gym_spaces, where)
            refusal = policy_refusal(src.acting, src.params, m.spec.acting, "PPO")
            if refusal:
                raise PolicyMismatchError(f"checkpoint {where!r} ({src.algo_name}) cannot "
                                          f"start PPO: {refusal}; {ACCEPTED}")
            mine = current[module_id]["policy"]
            check_same_shapes(where, "policy network", src.params["policy"], mine,
                              f"model_config {m.config.model_config}")
            out[module_id] = jax.device_get(src.params["policy"])
        return out
    finally:
        saved.stop()
