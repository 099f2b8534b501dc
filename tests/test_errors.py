"""One error root: every exception class rljax_offline defines derives from `RljaxError`
(and is defined in `rljax_offline/errors.py`), and the CLI turns any of them into one line on
stderr and its exit code."""

import importlib
import inspect
import pkgutil

import pytest

import rljax_offline
from rljax_offline import errors
from rljax_offline.errors import ConfigError, RljaxError, UsageError


def _modules():
    for info in pkgutil.walk_packages(rljax_offline.__path__, "rljax_offline."):
        if info.name.endswith("__main__"):
            continue  # running it is the CLI itself
        yield importlib.import_module(info.name)


def _exception_classes():
    """{qualified name: class} of every exception class defined in a module of the package."""
    found = {}
    for module in _modules():
        for obj in vars(module).values():
            if (inspect.isclass(obj) and issubclass(obj, BaseException)
                    and obj.__module__.startswith("rljax_offline")):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


def test_every_named_error_derives_from_the_root_and_lives_in_errors_py():
    classes = _exception_classes()
    assert len(classes) > 10, sorted(classes)
    # Private control-flow signals (caught in the module that raises them) are not errors a
    # user ever sees; every public exception class is a named error.
    public = {k: c for k, c in classes.items() if not c.__name__.startswith("_")}
    outside = sorted(k for k, c in public.items() if not issubclass(c, RljaxError))
    assert not outside, f"exception classes not derived from RljaxError: {outside}"
    elsewhere = sorted(k for k in public if not k.startswith("rljax_offline.errors."))
    assert not elsewhere, f"named errors defined outside rljax_offline/errors.py: {elsewhere}"


def test_named_errors_keep_their_builtin_bases_and_old_import_paths():
    from rljax_offline.acting.behavior import BehaviorError
    from rljax_offline.acting.recording import PolicyMismatchError
    from rljax_offline.algorithms.config import ConfigError as ConfigErrorThere
    from rljax_offline.data.stream import DataChangedError
    from rljax_offline.episode.episode import EpisodeError
    from rljax_offline.export import ExportError
    from rljax_offline.runtime.distributed import DistributedError
    from rljax_offline.spaces import SpaceError

    for cls in (BehaviorError, ConfigErrorThere, DataChangedError, EpisodeError, ExportError,
                SpaceError, UsageError, errors.OfflineDataError, errors.CheckpointError):
        assert issubclass(cls, ValueError) and issubclass(cls, RljaxError), cls
    assert issubclass(PolicyMismatchError, ConfigError)
    assert issubclass(DistributedError, ConfigError)
    assert issubclass(errors.CheckpointNotFoundError, FileNotFoundError)
    assert rljax_offline.ConfigError is ConfigErrorThere is errors.ConfigError


def _instance(cls):
    """An instance whose message is "boom", whatever the class's own constructor takes."""
    try:
        return cls("boom\nsecond line")
    except TypeError:  # a constructor of its own (TrainingDivergedError's iteration, ...)
        e = cls.__new__(cls)
        BaseException.__init__(e, "boom\nsecond line")
        return e


@pytest.mark.parametrize("cls", sorted(
    (c for c in _exception_classes().values() if not c.__name__.startswith("_")),
    key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_cli_turns_every_named_error_into_one_line_and_its_exit_code(cls, monkeypatch, capsys):
    from rljax_offline.cli import inspect as inspect_command
    from rljax_offline.cli import main

    def fail(args):
        raise _instance(cls)

    monkeypatch.delenv("RLJAX_DEBUG", raising=False)
    monkeypatch.setattr(inspect_command, "run", fail)
    code = main(["inspect", "--input", "somewhere"])
    assert code == (2 if issubclass(cls, (ConfigError, UsageError)) else 1)
    captured = capsys.readouterr()
    assert captured.err == "error: rljax-offline inspect: boom second line\n"
    assert captured.out == ""
