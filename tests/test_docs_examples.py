"""The site's Python code blocks: every block on every page parses, and the pages' examples run
as written, in order, one namespace a page (or a chain of pages that build on each other), in a
fresh working directory where a setup step has made the data files the text names. A page whose
blocks cannot run here (a long training run, a download, fragments of a larger program) is
listed in NOT_RUN with the reason and the test that covers its content instead."""

import ast
import os
import pathlib
import re

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# Pages whose blocks are not executed here, and why.
NOT_RUN = {
    "guides/custom-algorithm.md": "run as written by tests/test_custom_algorithm.py",
    "guides/data-on-disk.md": "reads s3://bucket/data and a foreign folder; what it shows is "
                              "tested in tests/test_data_s3.py and test_data_formats.py",
    "guides/minari-and-mujoco.md": "needs a downloaded Minari dataset and a 60,000-step SAC "
                                   "run (tests/test_data_minari.py, test_mujoco_datasets.py)",
    "guides/ope.md": "5,000 FQE updates per estimator on mixed data "
                     "(tests/test_ope_api.py, test_ope_fqe.py)",
    "guides/recurrent-and-image.md": "fragments of a larger program "
                                     "(tests/test_recurrent_policy.py, test_cnn_policy.py)",
    "guides/rllib-guide-end-to-end.md": "PPO trained to 450 (~45k env steps; "
                                        "tests/test_ppo.py runs the workflow)",
    "guides/sac.md": "10,000 SAC env steps and a CQL checkpoint (tests/test_sac.py)",
    "guides/rllib-offline-guide.md": "PPO to 450, 500 recorded episodes and BC to 450, run "
                                     "as written by tests/test_rllib_offline_guide.py (slow)",
    "guides/multi-agent-data.md": "run in order, with its printed output checked, by "
                                  "tests/test_multi_agent_episode.py",
    "guides/export.md#1": "an LSTM export and an env loop `play()` left to the reader "
                          "(tests/test_export_stateful.py)",
}


def python_blocks(page: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", (DOCS / page).read_text(), re.S | re.M)


def all_pages() -> list[str]:
    return sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))


def run_pages(pages: list[str], namespace: dict | None = None) -> dict:
    """Runs each page's blocks (`page#k`: only block k) in one namespace; returns it."""
    namespace = {"__name__": "docs_example"} if namespace is None else namespace
    for entry in pages:
        page, _, index = entry.partition("#")
        blocks = python_blocks(page)
        for k, code in enumerate(blocks):
            if index and int(index) != k:
                continue
            exec(compile(code, f"docs/{page} (block {k})", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("page", all_pages())
def test_every_python_block_parses(page):
    for k, code in enumerate(python_blocks(page)):
        try:
            ast.parse(code)
        except SyntaxError as e:
            pytest.fail(f"docs/{page} block {k}: {e}")


def test_every_page_with_code_is_run_or_says_why_not():
    covered = set(RUN_PAGES) | {entry.partition("#")[0] for chain in RUN_CHAINS for entry in chain}
    for page in all_pages():
        if python_blocks(page):
            assert page in covered or page in NOT_RUN, (
                f"docs/{page} has Python blocks: run them here or say why not in NOT_RUN")


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def record(path: str, env: str = "CartPole-v1", episodes: int = 20) -> None:
    from rljax_offline.acting.env_runner import record_expert
    record_expert(env, path, num_episodes=episodes, progress=False)


RUN_PAGES = ["concepts/episodes.md", "concepts/connectors.md", "rllib-migration.md",
             "concepts/architecture.md", "guides/algorithms-zoo.md",
             "guides/multi-agent-training.md", "guides/multi-agent-datasets.md",
             "guides/matd3-bc.md"]
RUN_CHAINS = [["guides/offline-algorithms.md", "guides/export.md#0"]]


@pytest.mark.slow
def test_architecture_page(workdir):
    """A policy loaded without an Algorithm, judged by OPE; a policy that draws K votes with
    its key; four seeds in one program, one saved and loaded."""
    ns = run_pages(["concepts/architecture.md"])
    assert ns["policy"].acting.takes_key and ns["bc"].algo_name == "bc"
    assert {"mean", "std"} <= set(ns["result"])
    assert ns["load_policy"]("/tmp/arch_seed2").seed == 2


@pytest.mark.slow
def test_algorithms_zoo_page(workdir, capsys):
    """The defaults printed as the page says; a Cal-QL checkpoint fine-tunes online with its
    own losses (a 200-step episode, 128 offline rows a minibatch) and starts SAC; BCQ acts;
    DiscreteBCQ refuses Box actions in one line."""
    run_pages(["guides/algorithms-zoo.md"])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "0.001 0.01" and out[1] == "1.0 exp 10" and "True" in out
    assert "200 128" in out
    assert "(2, 1)" in out
    assert any(line.startswith("DiscreteBCQConfig needs Discrete actions") for line in out)
    assert "1000 0.001 0.75" in out


@pytest.mark.slow
def test_multi_agent_training_page(workdir, capsys):
    """Random simple_spread data, shared and per-agent BC, a checkpoint, team OPE; the
    printed lines are the page's."""
    pytest.importorskip("mpe2")
    run_pages(["guides/multi-agent-training.md"])
    shown = [line for block in re.findall(r"^```text\n(.*?)^```",
                                          (DOCS / "guides/multi-agent-training.md").read_text(),
                                          re.S | re.M) for line in block.splitlines()]
    assert capsys.readouterr().out.splitlines() == shown


def test_multi_agent_datasets_page(workdir, capsys):
    """A 10-episode simple_spread set made, read back, its logp recomputed."""
    pytest.importorskip("mpe2")
    ns = run_pages(["guides/multi-agent-datasets.md"])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "10 250 750" and out[-2:] == ["True", "True"]
    assert ns["meta"]["module_ids"] == ["spread"] and len(ns["episodes"]) == 10
    assert (workdir / "data" / "spread-eps0.3" / "dataset.json").exists()


def test_episodes_then_connectors_pages(workdir):
    ns = run_pages(["concepts/episodes.md", "concepts/connectors.md"])
    assert len(ns["ep"]) == 5 and ns["ep2"].get_return() == 0.0
    assert ns["columns"]["obs"].shape[-1] == 16  # frame stacking of 4 four-dim observations
    assert ns["pipe"].out_spaces(ns["spaces"]).observation.shape == (4,)  # the stateless one


def test_matd3_bc_page(workdir):
    """40 random simple_spread episodes recorded, one iteration of MATD3+BC, evaluated; the
    same on speaker-listener (two modules of different spaces)."""
    pytest.importorskip("mpe2")
    ns = run_pages(["guides/matd3-bc.md"])
    assert np.isfinite(ns["result"]["learners"]["default_policy"]["qf_loss"])
    assert ns["result"]["evaluation"]["env_runners"]["num_episodes"] == 4
    assert np.isfinite(ns["sl_result"]["learners"]["listener+speaker"]["qf_loss"])
    assert set(ns["sl_result"]["evaluation"]["env_runners"]["module_episode_returns_mean"]) == {
        "speaker", "listener"}


def test_rllib_migration_page(workdir):
    ns = run_pages(["rllib-migration.md"])
    assert np.isfinite(ns["results"]["evaluation"]["env_runners"]["episode_return_mean"])
    assert (workdir / "bc_ckpt").is_dir()


def test_offline_algorithms_page_then_export(workdir):
    """The MARWIL example on 20 recorded expert episodes, then the export example on its
    `algo` (StableHLO and ONNX), called with a batch of observations."""
    pytest.importorskip("onnxruntime")
    record("demo_output/cartpole_expert")
    obs = np.zeros((3, 4), np.float32)
    ns = run_pages(["guides/offline-algorithms.md", "guides/export.md#0"], {"obs": obs})
    assert np.isfinite(ns["result"]["evaluation"]["env_runners"]["episode_return_mean"])
    assert np.asarray(ns["actions"]).shape == (3,)
    assert os.path.getsize(workdir / "policy.onnx") > 0
