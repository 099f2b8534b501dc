"""mkdocs hooks (`hooks:` in mkdocs.yml): the pages generated from the code at every build.

- the config reference, the error hierarchy and one API page per public package
  (`scripts/docs_reference.py`);
- the tutorials, rendered from the executed notebooks in `notebooks/` with their saved outputs
  (`tests/test_notebooks.py` runs them);
- the benchmark figures, served from `benchmarks/figures/` where the benchmarks write them.
"""

from __future__ import annotations

import base64
import json
import pathlib
import sys

from markdown.extensions import Extension
from markdown.preprocessors import Preprocessor
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import docs_reference  # noqa: E402

NOTEBOOKS = ROOT / "notebooks"
FIGURES = ROOT / "benchmarks" / "figures"


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _fence(text: str, lang: str = "") -> list[str]:
    ticks = "````" if "```" in text else "```"
    return [f"{ticks}{lang}", text.rstrip("\n"), ticks, ""]


def notebook_page(path: pathlib.Path) -> tuple[str, dict[str, bytes]]:
    """A notebook as Markdown with its saved outputs, and {image name: PNG bytes}."""
    nb = json.loads(path.read_text())
    note = [f"*The notebook `notebooks/{path.name}` as executed, with its saved outputs "
            "(`tests/test_notebooks.py` runs it): open it in Jupyter to run it yourself.*", ""]
    lines: list[str] = []
    images: dict[str, bytes] = {}
    for cell in nb["cells"]:
        source = _text(cell.get("source", ""))
        if cell["cell_type"] == "markdown":
            lines += [source, ""]
            if note:  # under the notebook's title
                lines += note
                note = []
            continue
        if cell["cell_type"] != "code" or not source.strip():
            continue
        lines += _fence(source, "python")
        stream = ""
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                stream += _text(out.get("text", ""))
                continue
            if stream:
                lines += _fence(stream, "text")
                stream = ""
            data = out.get("data", {})
            if "image/png" in data:
                name = f"{path.stem}-{len(images)}.png"
                images[name] = base64.b64decode(_text(data["image/png"]))
                lines += [f"![output]({name})", ""]
            elif "text/plain" in data:
                lines += _fence(_text(data["text/plain"]), "text")
            elif out.get("output_type") == "error":
                lines += _fence("\n".join(out.get("traceback", [])), "text")
        if stream:
            lines += _fence(stream, "text")
    return "\n".join(note + lines) + "\n", images


def on_files(files: Files, config) -> Files:
    for uri, content in docs_reference.api_pages().items():
        files.append(File.generated(config, uri, content=content))
    files.append(File.generated(config, "reference/config.md",
                                content=docs_reference.config_reference()))
    files.append(File.generated(config, "reference/errors.md",
                                content=docs_reference.errors_reference()))
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        page, images = notebook_page(path)
        files.append(File.generated(config, f"tutorials/{path.stem}.md", content=page))
        for name, data in images.items():
            files.append(File.generated(config, f"tutorials/{name}", content=data))
    for path in sorted(FIGURES.rglob("*.png")):
        uri = f"benchmarks/figures/{path.relative_to(FIGURES).as_posix()}"
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


class DoctestFences(Preprocessor):
    """Runs of `>>>` / `...` lines outside code fences become fenced `pycon` blocks, so the
    docstrings' examples (doctest style, as `tests/test_doctests.py` runs them) render as code
    and their brackets are not read as Markdown links."""

    def run(self, lines: list[str]) -> list[str]:
        out: list[str] = []
        fenced = False
        i = 0
        while i < len(lines):
            line = lines[i]
            if line.lstrip().startswith(("```", "~~~")):
                fenced = not fenced
            if fenced or not line.lstrip().startswith(">>>"):
                out.append(line)
                i += 1
                continue
            indent = line[:len(line) - len(line.lstrip())]
            block = []
            while i < len(lines) and lines[i].strip() and lines[i].startswith(indent) and (
                    block == [] or not lines[i].lstrip().startswith(("```", "~~~"))):
                block.append(lines[i][len(indent):])
                i += 1
            out += ([""] if out and out[-1].strip() else []) + [
                f"{indent}```pycon", *[indent + b for b in block], f"{indent}```", ""]
        return out


class DoctestFencesExtension(Extension):
    def extendMarkdown(self, md):  # noqa: N802 - Python-Markdown's name
        md.preprocessors.register(DoctestFences(md), "doctest_fences", 40)


def _fill_packages(nav: list) -> bool:
    """Sets the nav's "Packages" entry (under "Reference") to one page per public package."""
    for item in nav:
        if isinstance(item, dict):
            for key, value in item.items():
                if key == "Packages":
                    item[key] = [{name: f"reference/api/{name}.md"}
                                 for name in docs_reference.API_PACKAGES]
                    item[key].append({"core modules": "reference/api/core.md"})
                    return True
                if isinstance(value, list) and _fill_packages(value):
                    return True
    return False


@event_priority(100)  # before mkdocstrings reads the Markdown extensions
def on_config(config):
    config.markdown_extensions.append(DoctestFencesExtension())
    if not _fill_packages(config.nav or []):
        raise ValueError("mkdocs.yml's nav has no \"Packages\" entry for the API pages")
    return config
