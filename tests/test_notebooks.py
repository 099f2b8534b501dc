"""Every notebook in notebooks/ runs top to bottom from a clean kernel (CPU) and shows what its
text says: after the last cell, one more cell in the same kernel reports the notebook's
variables as JSON, and the test checks the results the notebook shows (the BC policy reaching
the expert, the episode getters' values, the 8-device learner matching 1, notebook 04's
ranking of the algorithms, ...)."""

import json
import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
MARK = "NOTEBOOK_RESULTS "

# Per notebook: an expression (evaluated in its kernel after the last cell) of the results it
# shows, as JSON-able values.
REPORT = {
    "01_quickstart": """{
        "episodes": info["episodes"], "timesteps": info["timesteps"],
        "losses": [float(x) for x in loss], "returns": [float(x) for x in ret],
        "final_return_mean": float(final["episode_return_mean"]), "driven_return": total}""",
    "02_episodes_and_connectors": """{
        "len": len(ep), "last_obs": ep.get_observations(-1).tolist(),
        "filled": ep.get_rewards(slice(-8, None), fill=0.0).tolist(),
        "chunk": [len(chunk), chunk.t_started, chunk.len_lookback_buffer],
        "returns": [float(ep.get_return()), float(new.get_return()),
                    float(jax.jit(lambda e: e.get_return())(ep))],
        "mask_rows": np.asarray(batch.mask).sum(1).tolist(),
        "obs_dim": int(cols["obs"].shape[-1]),
        "past_3_rewards": np.asarray(out["past_3_rewards"]).tolist()}""",
    "03_data_formats_and_devices": """{
        "devices": len(jax.devices()), "episodes": len(eps), "steps": sum(lengths),
        "tabular_same": all(len(t) == len(by_id[t.id_]) and
                            np.array_equal(t.observations, by_id[t.id_].observations)
                            for t in tab), "tabular_count": len(tab),
        "foreign": [len(ep), bool(ep.is_terminated), list(ep.extra_model_outputs)],
        "order": order, "param_diff": diff,
        "losses_1": losses[1], "losses_8": losses[8]}""",
    "04_offline_rl_on_mixed_data": """{
        "curves": {k: [float(x) for x in v] for k, v in curves.items()},
        "data_return_mean": float(returns.mean())}""",
}


def check_01(r):
    assert (r["episodes"], r["timesteps"]) == (200, 100_000)
    assert r["losses"][-1] < r["losses"][0]
    # BC reaches the expert's level: the last evaluations, the 20-episode evaluation and the
    # episode driven by hand
    assert min(r["returns"][-3:]) >= 400 and r["final_return_mean"] >= 450, r
    assert r["driven_return"] >= 400  # the hand-driven episode of the pole-angle plot (443)


def check_02(r):
    assert r["len"] == 6 and r["last_obs"] == [6.0, 6.0]
    assert r["filled"] == [0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert r["chunk"] == [2, 2, 0]
    assert r["returns"] == [15.0, 0.0, 15.0]  # set_rewards made a copy; jit sees the same
    assert r["mask_rows"] == [5, 12, 3, 9]
    assert r["obs_dim"] == 16  # frame stack of 4 over 4 features
    assert r["past_3_rewards"] == [[1.0] * 3] * 4


def check_03(r):
    assert r["devices"] == 8 and (r["episodes"], r["steps"]) == (20, 8808)
    assert r["tabular_same"] and r["tabular_count"] == 10  # the tabular fixture's episodes
    assert r["foreign"] == [5, True, ["logprobs_t"]]
    n = len(r["order"])  # every episode once, shuffled
    assert n == 100 and sorted(r["order"]) == list(range(n)) and r["order"] != list(range(n))
    # float32 summation order only, amplified by 150 Adam updates (~1e-4 at most; the float64
    # equality of 8 devices and 1 is tests/test_learner_core.py's)
    assert r["param_diff"] < 1e-3
    assert r["losses_1"][-1] < 0.5 * r["losses_1"][0]
    assert max(abs(a - b) for a, b in zip(r["losses_1"], r["losses_8"])) < 1e-4


def check_04(r):
    c = r["curves"]
    mean = {k: sum(v) / len(v) for k, v in c.items()}
    last = {k: sum(v[-3:]) / 3 for k, v in c.items()}
    print(f"notebook 04: mean {mean}, last three {last}")
    # The text's ranking: BC near the data's average; MARWIL clearly better; IQL climbs to
    # the expert's 500 and stays, ahead of all; CQL gets close to it but swings.
    assert last["BC"] < 100 and mean["BC"] < 2 * r["data_return_mean"]
    assert mean["MARWIL"] > mean["BC"] + 40
    assert last["IQL"] >= 450 and last["IQL"] == max(last.values())
    assert max(c["CQL"]) >= 300 and max(c["CQL"]) > max(c["BC"]) + 150


CHECKS = {"01_quickstart": check_01, "02_episodes_and_connectors": check_02,
          "03_data_formats_and_devices": check_03, "04_offline_rl_on_mixed_data": check_04}


def test_notebooks_exist_and_each_is_checked():
    assert {p.stem for p in NOTEBOOKS} == set(REPORT) == set(CHECKS)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_shows_its_results(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(
        f"import json as _json\nprint({MARK!r} + _json.dumps({REPORT[path.stem]}))"))
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert images, f"{path.name} shows no picture"
    text = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    results = json.loads(text[text.index(MARK) + len(MARK):])
    CHECKS[path.stem](results)


def test_notebook_data_is_found_from_any_working_directory(tmp_path):
    # The kernel starts in an unrelated folder (as `jupyter nbconvert --execute notebooks/...`
    # from the repository root, or from anywhere): the cells that read the fixtures still run.
    path = next(p for p in NOTEBOOKS if p.name.startswith("03_"))
    nb = nbformat.read(path, as_version=4)
    first_read = next(i for i, c in enumerate(nb.cells)
                      if c.cell_type == "code" and "fixtures /" in c.source)
    nb.cells = nb.cells[:first_read + 1]
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    assert not any(o.get("output_type") == "error" for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
