"""`record`, `inspect` and `convert` on multi-agent envs and data (in process: `main(argv)`):
mpe2 and our asynchronous env recorded, per-module and per-agent summaries that agree with
the episodes, per-module conversion, and the flags that make no sense refused by name."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from rljax_offline.cli.main import main
from rljax_offline.data import read_episodes
from rljax_offline.data.multi_agent_io import read_multi_agent_episodes


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    return code, (lines[-1] if lines else None), err


def test_record_inspect_convert_mpe2_spread(tmp_path, capsys):
    pytest.importorskip("mpe2")
    data = str(tmp_path / "spread")
    code, rec, err = run(capsys, "record", "--env", "mpe2:simple_spread_v3", "--env-config",
                         '{"N": 3, "max_cycles": 10}', "--output", data, "--episodes", "3",
                         "--num-envs", "2", "--max-rows-per-file", "2")
    assert code == 0, err
    assert rec["modules"] == ["default_policy"] and rec["files"] == 4  # 2 pairs
    eps = read_multi_agent_episodes(data)
    assert len(eps) == 3 and all(ep.agent_steps() == 30 for ep in eps)
    code, info, err = run(capsys, "inspect", "--input", data)
    assert code == 0, err
    assert info["format"] == "multi_agent_episodes"
    assert (info["episodes"], info["env_steps"], info["agent_steps"]) == (3, 30, 90)
    assert info["episodes_with_global_state"] == 3
    mod = info["modules"]["default_policy"]
    assert mod["agents"] == ["agent_0", "agent_1", "agent_2"] and mod["agent_steps"] == 90
    assert mod["obs_shape"] == [[18]] and mod["model_outputs"] == ["action_logp"]
    for a in ("agent_0", "agent_2"):
        want = np.mean([float(ep.agent_episodes[a].get_return()) for ep in eps])
        assert info["agents"][a]["return_mean"] == pytest.approx(want)
        assert info["agents"][a]["truncated"] == 3
    assert info["episode_return_mean"] == pytest.approx(np.mean([e.get_return() for e in eps]))

    tab = str(tmp_path / "tab")
    code, conv, err = run(capsys, "convert", "--input", data, "--output", tab, "--to",
                          "tabular")
    assert code == 0 and conv["modules"] == ["default_policy"], err
    code, tinfo, err = run(capsys, "inspect", "--input", tab)
    assert tinfo["format"] == "multi_agent_tabular" and tinfo["agent_steps"] == 90
    assert tinfo["agents"]["agent_1"]["return_mean"] == pytest.approx(
        info["agents"]["agent_1"]["return_mean"])
    assert "agent_index" in tinfo["schema"]

    rows = str(tmp_path / "rows")
    code, conv, err = run(capsys, "convert", "--input", data, "--output", rows, "--to",
                          "episodes")
    assert code == 0, err
    single = read_episodes(rows + "/default_policy")
    assert len(single) == 9 and {e.agent_id for e in single} == {"agent_0", "agent_1",
                                                                  "agent_2"}


def test_async_env_per_agent_modules_and_tabular_record(tmp_path, capsys):
    data = str(tmp_path / "async")
    code, rec, err = run(capsys, "record", "--env", "async_agents", "--output", data,
                         "--episodes", "2", "--module-mapping", "per-agent", "--num-envs", "1")
    assert code == 0, err
    assert rec["modules"] == ["fast", "late", "slow"]
    assert rec["env_factory"] == "rljax_offline.envs.async_agents:AsyncAgentsEnv"
    code, info, err = run(capsys, "inspect", "--input", data)
    assert set(info["modules"]) == {"fast", "late", "slow"}
    eps = read_multi_agent_episodes(data)
    assert info["agents"]["slow"]["agent_steps"] == sum(len(e.agent_episodes["slow"])
                                                        for e in eps)
    assert info["agents"]["fast"]["terminated"] == 2
    tab = str(tmp_path / "tab")
    code, rec, err = run(capsys, "record", "--env", "async_agents", "--output", tab,
                         "--episodes", "2", "--tabular", "--module-mapping",
                         '{"fast": "m0", "slow": "m0", "late": "m1"}')
    assert code == 0, err
    code, tinfo, err = run(capsys, "inspect", "--input", tab)
    assert tinfo["modules"]["m0"]["agents"] == ["fast", "slow"]
    assert tinfo["agents"]["late"]["module_id"] == "m1"


@pytest.mark.parametrize("argv, message", [
    (["--env", "async_agents", "--policy", "ckpt"], "--policy: not for multi-agent"),
    (["--env", "async_agents", "--tabular", "--max-rows-per-file", "5"],
     "one file per module"),
    (["--env", "mpe2:no_such_env_v0"], "cannot import 'mpe2.no_such_env_v0'"),
    (["--env", "async_agents", "--module-mapping", '{"fast": "m"}'],
     "no module for agents"),
    (["--env", "CartPole-v1", "--module-mapping", "per-agent"], "for multi-agent envs"),
    (["--env", "async_agents", "--env-config", '{"bogus": 1}'], "does not take env_config"),
])
def test_multi_agent_flags_that_make_no_sense_are_refused(tmp_path, capsys, argv, message):
    if "mpe2" in " ".join(argv):
        pytest.importorskip("mpe2")
    code, _, err = run(capsys, "record", "--output", str(tmp_path / "x"), *argv)
    assert code == 2 and message in err, err


def test_shared_module_over_different_spaces_is_named(tmp_path, capsys):
    pytest.importorskip("mpe2")
    code, _, err = run(capsys, "record", "--env", "mpe2:simple_speaker_listener_v4",
                       "--output", str(tmp_path / "sl"), "--episodes", "1")
    assert code == 2 and "'speaker_0' and 'listener_0'" in err and "default_policy" in err


def test_convert_refuses_minari_and_tabular_row_limits_for_multi_agent(tmp_path, capsys):
    data = str(tmp_path / "async")
    assert run(capsys, "record", "--env", "async_agents", "--output", data, "--episodes",
               "1")[0] == 0
    code, _, err = run(capsys, "convert", "--input", data, "--output", str(tmp_path / "t"),
                       "--to", "tabular", "--max-rows-per-file", "3")
    assert code == 2 and "one file per module" in err
    code, _, err = run(capsys, "convert", "--input", data, "--output", str(tmp_path / "m"),
                       "--to", "minari")
    assert code == 2 and "--to tabular or --to episodes" in err
    code, _, err = run(capsys, "inspect", "--input", data, "--on-bad-file", "skip")
    assert code == 2 and "apply to single-agent data" in err


def test_env_ids_short_forms_and_module_function(tmp_path, capsys):
    from rljax_offline.envs.multi_agent_make import canonical_env_id, is_multi_agent_env_id

    assert not is_multi_agent_env_id("CartPole-v1")
    assert not is_multi_agent_env_id("ale_py:ALE/Pong-v5")  # gymnasium's module:id form
    assert is_multi_agent_env_id("mpe2.simple_spread_v3:parallel_env")
    if importlib.util.find_spec("mpe2") is not None:
        assert canonical_env_id("mpe2:simple_spread_v3") == "mpe2.simple_spread_v3:parallel_env"
        assert canonical_env_id("pettingzoo:mpe2.simple_v3") == "mpe2.simple_v3:parallel_env"
    code, rec, err = run(capsys, "record", "--env",
                         "rljax_offline.envs.async_agents:AsyncAgentsEnv", "--env-config",
                         '{"max_steps": 5}', "--output", str(tmp_path / "d"), "--episodes", "2",
                         "--num-envs", "1")
    assert code == 0, err
    eps = read_multi_agent_episodes(str(tmp_path / "d"))
    assert [len(ep) for ep in eps] == [5, 5]
