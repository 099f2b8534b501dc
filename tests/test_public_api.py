"""`rljax_offline.__all__` is the public API: every name resolves, one name per object, and the
heavy parts load only when asked for."""

import subprocess
import sys

import rljax_offline


def test_every_public_name_resolves_and_no_object_has_two_names():
    objects = {name: getattr(rljax_offline, name) for name in rljax_offline.__all__}
    assert len(set(map(id, objects.values()))) == len(objects)
    assert len(set(rljax_offline.__all__)) == len(rljax_offline.__all__)
    assert set(rljax_offline._LAZY) <= set(rljax_offline.__all__)
    for name in ("Algorithm", "BCConfig", "MARWILConfig", "EnvRunner", "Episode",
                 "OfflineDataError", "EpisodeError",
                 "read_episodes", "iter_episodes", "write_episodes", "EpisodeWriter",
                 "write_minari", "export_policy", "default_logger"):
        assert name in rljax_offline.__all__


def test_public_names_are_the_defining_modules_objects():
    from rljax_offline.acting.env_runner import EnvRunner
    from rljax_offline.data.reader import read_episodes

    assert rljax_offline.read_episodes is read_episodes and rljax_offline.EnvRunner is EnvRunner


def test_star_import_and_lazy_loading():
    code = ("import sys\n"
            "import rljax_offline\n"
            "heavy = [m for m in ('rljax_offline.algorithms.algorithm', 'flax',"
            " 'rljax_offline.export', 'minari', 'tensorboardX') if m in sys.modules]\n"
            "assert not heavy, heavy\n"
            "ns = {}\n"
            "exec('from rljax_offline import *', ns)\n"
            "assert 'Algorithm' in ns and 'EnvRunner' in ns\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


def test_unknown_name_is_an_attribute_error():
    try:
        rljax_offline.NotAThing  # noqa: B018
    except AttributeError as e:
        assert "NotAThing" in str(e)
    else:
        raise AssertionError("expected AttributeError")
