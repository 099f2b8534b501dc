"""The connector pipelines of an algorithm, assembled in this one place from its config and
spaces: the learner pipeline (the user's pieces, the model's, RLlib's defaults, the
algorithm's own, and for a recurrent policy the sequence pieces), the env-to-module and the
module-to-env pipelines, and the learner columns the data keeps.

Recurrent policies (`use_lstm` / `use_gru`): the learner pipeline ends with RLlib's
`AddStatesFromEpisodesToBatch` and `AddTimeDimToBatchAndZeroPad` (then the algorithm's
sequence pieces), so its rows are `max_seq_len` sequences and the data keeps their
`state_in`, `seq_lens` and `loss_mask` besides the spec's columns; the env-to-module pipeline
adds the state and a time axis of 1. A transformer sampled in windows (`sample_unit="windows"`,
the Decision Transformer's default) keeps flat rows instead: the learner cuts its context
windows as it samples them (`data.device.sample_windows`).

The env-to-module pipeline acts with the state the learner pipeline fitted, piece by piece
of the same name (`env_to_module_state`): by default both start with the same custom pieces.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax

from rljax_offline.algorithms.config import AlgorithmConfig, ConfigError
from rljax_offline.algorithms.marwil import add_returns_to_go
from rljax_offline.connectors import (
    Connector,
    Spaces,
    default_env_to_module,
    default_learner,
    default_module_to_env,
    model_connectors,
    pipeline,
)
from rljax_offline.connectors.common import add_states, add_time_dim
from rljax_offline.connectors.core import piece_name, share_states
from rljax_offline.learning.spec import AlgorithmSpec

SEQUENCE_COLUMNS = ("state_in", "seq_lens", "loss_mask")
# The algorithm's own learner pieces that change the data's rows as the env saw them (the
# executed, clipped action) rather than make training targets: `Pipelines.rows` keeps them.
ROW_PIECES = ("clip_actions_inside_bounds",)


class Pipelines(NamedTuple):
    """An algorithm's three pipelines and `columns`, the learner columns its data keeps
    (the spec's; for a recurrent policy also `SEQUENCE_COLUMNS`). `rows`: the front of the
    learner pipeline (the user's pieces, the model's and RLlib's defaults, and of the
    algorithm's own pieces only the `ROW_PIECES`, never targets such as GAE, which reads the
    value network, or n-step returns): the data's rows as a policy sees them, which
    off-policy evaluation reads; its state is the learner's, piece by piece of the same
    name."""

    learner: Connector
    env_to_module: Connector
    module_to_env: Connector
    columns: tuple[str, ...]
    rows: Connector | None = None


def _custom_learner_pieces(config: AlgorithmConfig, spaces: Spaces) -> list[Connector]:
    """The config's pieces in front of the defaults (the user's, and an algorithm's own
    fitted transform such as TD3+BC's observation normalization)."""
    return config.learner_connector_pieces(spaces)


def _learner_base(config: AlgorithmConfig, spaces: Spaces, custom: list[Connector],
                  model: list[Connector]) -> Connector:
    """The user's pieces, then the model's, then RLlib's defaults (unless turned off)."""
    return default_learner(spaces, *custom, *model,
                           add_default_connectors=config.add_default_connectors_to_learner_pipeline)


def build(config: AlgorithmConfig, spaces: Spaces, **spec_options: Any
          ) -> tuple[AlgorithmSpec, Pipelines]:
    """The spec the config makes for the spaces after the learner pipeline's defaults
    (unchanged), and the pipelines around it; `spec_options` go to `make_spec` (MAPPO's
    `value_input`)."""
    custom = _custom_learner_pieces(config, spaces)
    # lstm_use_prev_action / _reward: stateless pieces after the user's, in both pipelines
    model = model_connectors(config.model_config or {})
    base = _learner_base(config, spaces, custom, model)
    out = base.out_spaces(spaces)
    spec: AlgorithmSpec = config.make_spec(out.observation, out.action, **spec_options)
    sequences, seq_kwargs, columns = (), {}, tuple(spec.data.columns)
    windows = config.sample_unit == "windows"
    if windows and not (spec.data.windows and spec.acting.is_stateful):
        reads = "a recurrent state" if spec.acting.is_stateful else "single steps"
        raise ConfigError(f"{type(config).__name__}: sample_unit='windows' cuts context "
                          f"windows for a transformer (the Decision Transformer); this "
                          f"algorithm's policy reads {reads} (use sample_unit='timesteps')")
    if spec.acting.is_stateful:
        policy = spec.acting.policy
        seq_kwargs = dict(max_seq_len=policy.max_seq_len, initial_state=policy.initial_state())
    if spec.acting.is_stateful and not windows:  # windows: flat rows, cut as sampled
        sequences = (add_states(**seq_kwargs), add_time_dim(policy.max_seq_len),
                     *spec.data.sequence_connector)
        columns = tuple(dict.fromkeys((*columns, *SEQUENCE_COLUMNS)))
    e2m_custom = (list(config.env_to_module_connector(spaces))
                  if config.env_to_module_connector else custom)
    return spec, Pipelines(
        learner=pipeline(base, *spec.data.learner_connector, *sequences),
        env_to_module=default_env_to_module(
            spaces, *e2m_custom, *model,
            add_default_connectors=config.add_default_connectors_to_env_to_module_pipeline,
            **seq_kwargs),
        module_to_env=default_module_to_env(spaces, distribution=spec.acting.dist),
        columns=columns, rows=pipeline(base, *(p for p in spec.data.learner_connector
                                               if piece_name(p) in ROW_PIECES)))


def value_warmup(config: AlgorithmConfig, spaces: Spaces) -> tuple[Connector, Spaces]:
    """The learner pipeline of a value warm-up on offline data (PPO's fine-tuning): the
    user's pieces and RLlib's defaults, then the discounted returns-to-go; and the spaces
    after the defaults (the value network's input)."""
    base = _learner_base(config, spaces, _custom_learner_pieces(config, spaces), [])
    return pipeline(base, add_returns_to_go(config.gamma)), base.out_spaces(spaces)


def env_to_module_state(pipelines: Pipelines, spaces: Spaces, learner_state: Any) -> Any:
    """The env-to-module state: fresh, but for each piece the learner pipeline has by the
    same name, the state the learner fitted (a mean-std filter's statistics)."""
    fresh = pipelines.env_to_module.init(spaces)
    return share_states(pipelines.env_to_module, fresh, pipelines.learner,
                        jax.device_get(learner_state))
