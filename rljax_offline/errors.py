"""The project's named errors: one base class a user can catch, one subclass per layer.

`RljaxError` is the base of every error rljax_offline names; every one of them is defined here
(and re-exported where it is raised, so `from rljax_offline.spaces import SpaceError` keeps
working). `rljax-offline` turns any of them into one line `error: ...`: exit code 2 for a
usage error (`ConfigError`, `UsageError` and their subclasses), 1 for the rest. Each subclass
also derives from the builtin a caller would have caught before (`ValueError`, ...), so
existing `except ValueError` code keeps working. `tests/test_errors.py` checks that no
exception class of the package escapes this root.
"""

from __future__ import annotations


class RljaxError(Exception):
    """Base of every named rljax_offline error (bad data, bad checkpoint, diverged run)."""


def _where(file: str | None, row: int | None, column: str | None, line: int | None) -> str:
    parts = []
    if file is not None:
        parts.append(f"file {file!r}")
    if line is not None:
        parts.append(f"line {line}")
    if row is not None:
        parts.append(f"row {row}")
    if column is not None:
        parts.append(f"column {column!r}")
    return ", ".join(parts)


class OfflineDataError(RljaxError, ValueError):
    """Bad offline data: missing or corrupt file, wrong schema, unsafe or malformed payload,
    values outside the spaces. Names the file, row (or line, for JSON lines) and column at
    fault where known.

    Args:
      message: what is wrong and what was expected (kept as `reason`).
      file: the file at fault.
      row: the row in that file.
      column: the column.
      line: the line, for JSON-lines input.
    """

    def __init__(self, message: str, *, file: str | None = None, row: int | None = None,
                 column: str | None = None, line: int | None = None):
        where = _where(file, row, column, line)
        super().__init__(f"{where}: {message}" if where else message)
        self.file, self.row, self.column, self.line = file, row, column, line
        self.reason = message


class UnsafePayloadError(OfflineDataError):
    """A payload that would run code or allocate memory out of proportion to its size."""


class IntegrityError(OfflineDataError):
    """A file we wrote no longer matches its checksums (flipped bits, torn write)."""


class OutputExistsError(RljaxError, FileExistsError):
    """A write would overwrite or land inside data that must be kept (an earlier run, the
    input of a conversion)."""


class CheckpointError(RljaxError, ValueError):
    """A checkpoint is missing, incomplete, corrupt (checksum mismatch) or does not match the
    model it is loaded into."""


class TrainingDivergedError(RljaxError, FloatingPointError):
    """A training iteration produced a non-finite metric (NaN or inf loss).

    Args:
      iteration: the training iteration whose metrics were not finite.
      metric: the first non-finite metric's name.
      value: its value.
    """

    def __init__(self, iteration: int, metric: str, value: float):
        super().__init__(f"training diverged at iteration {iteration}: metric {metric!r} is "
                         f"{value} (check the data for NaN/inf, or lower the learning rate)")
        self.iteration, self.metric, self.value = iteration, metric, value


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """`path` holds no complete checkpoint."""


class DataChangedError(OfflineDataError):
    """A stream resumed from a cursor did not find the data the cursor was made on."""


class ConfigError(RljaxError, ValueError):
    """A config key or value is invalid (named in the message)."""


class DistributedError(ConfigError):
    """A multi-process setting is wrong, or the processes could not join (named in the
    message; a usage error: exit code 2 on the command line)."""


class PolicyMismatchError(ConfigError):
    """A checkpoint's policy was trained for other observation or action spaces (or another
    network) than it is asked to act in (a usage error: exit code 2 on the command line)."""


class UsageError(RljaxError, ValueError):
    """Command-line flags that parse one by one but make no sense together (exit code 2)."""


class EpisodeError(RljaxError, ValueError):
    """An episode was built from inconsistent data (lengths, structure, shapes, ids)."""


class SpaceError(RljaxError, ValueError):
    """A space (or a space dict read from a file) is malformed or not supported."""


class BehaviorError(RljaxError, ValueError):
    """A behaviour or mix spec that cannot be parsed, or does not fit the action space."""


class ExportError(RljaxError, ValueError):
    """A policy that cannot be exported as asked (its pipeline, its spaces, the format)."""


class OPEError(RljaxError, ValueError):
    """Off-policy evaluation cannot run as asked (its data, its target policy, its methods)."""


class MissingActionLogpError(OPEError):
    """Importance-weighted estimators on data without the behaviour's `action_logp`."""


class ActionSpaceMismatchError(OPEError):
    """A target policy whose action space is not the data's (Box on Discrete, ...)."""


class EmptyEvaluationSplitError(OPEError):
    """The held-out evaluation share of the offline data holds no episode."""


class ZeroImportanceWeightsWarning(RljaxError, RuntimeWarning):
    """An importance-weighted OPE estimate is undefined: every trajectory weight is 0 (a greedy
    target that no recorded episode follows throughout), so the effective sample size is 0
    and the estimate is nan. Warned, not raised: the other estimators of the same run (FQE,
    DR) still stand. Under the error root like every named condition, so
    `warnings.simplefilter("error", ZeroImportanceWeightsWarning)` raises an `RljaxError`."""


class MultiAgentEpisodeError(EpisodeError):
    """A multi-agent env step that RLlib's episode rules refuse (data for an agent that is
    done, a step on a finished episode, a step without the reward of an agent that acted)."""


class AgentTruncatedWithoutObservationError(MultiAgentEpisodeError):
    """An agent was truncated at `env_step` with an action still hanging and no final
    observation, which value bootstrapping needs (RLlib's most reported multi-agent error)."""

    def __init__(self, agent_id, env_step: int):
        super().__init__(f"agent {agent_id!r} was truncated at env step {env_step} after it "
                         "acted, but the env returned no final observation for it (needed to "
                         "bootstrap its value): return the agent's last observation together "
                         "with truncated=True")
        self.agent_id, self.env_step = agent_id, env_step


class AgentNotInEnvError(MultiAgentEpisodeError):
    """An action for an agent that the env has not observed (not in the episode)."""

    def __init__(self, agent_id, env_step: int):
        super().__init__(f"env step {env_step}: action for agent {agent_id!r}, which is not in "
                         "the env (it never received an observation in this episode)")
        self.agent_id, self.env_step = agent_id, env_step


class ObservationOutsideSpaceError(MultiAgentEpisodeError):
    """An agent's observation does not lie in that agent's observation space."""

    def __init__(self, agent_id, env_step: int, space, observation):
        super().__init__(f"env step {env_step}: observation of agent {agent_id!r} is outside "
                         f"its observation space {space}: {observation!r}")
        self.agent_id, self.env_step = agent_id, env_step


class ModuleSpaceMismatchError(ConfigError):
    """Two agents with different observation or action spaces are mapped to one module."""


class AsynchronousAgentsError(OfflineDataError):
    """Multi-agent data whose agents do not all act at every env step, where an algorithm
    trains on joint rows (one row per env step holding every agent's step: MATD3+BC's
    centralised critic)."""


class MissingGlobalStateError(OfflineDataError):
    """A centralised critic reads the env's global state, which the multi-agent episode does
    not hold (not recorded, or not one state per env step)."""
