"""Every notebook in notebooks/ runs top to bottom from a clean kernel (CPU)."""

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_notebooks_exist():
    names = {p.name for p in NOTEBOOKS}
    assert {"01_quickstart.ipynb", "02_episodes_and_connectors.ipynb",
            "03_data_formats_and_devices.ipynb"} <= names, names


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert images, f"{path.name} shows no picture"


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
