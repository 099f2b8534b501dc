"""The documentation site: every section of the old 2,088-line README has a page, every page is
in the navigation, `mkdocs build --strict` passes (no warning: broken links and anchors,
docstrings griffe cannot read, unresolved cross-references), and every internal link of the
built HTML and of the README reaches a file."""

import html.parser
import os
import pathlib
import re
import subprocess
import sys
import urllib.parse
import zlib

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# Each heading of the README before the site (issue 34), with the page that holds it now.
README_HEADINGS = {
    "rljax_offline": "index.md",
    "Two commands on a fresh machine": "getting-started.md",
    "What you can do": "index.md",
    "Offline algorithms, RLlib style": "guides/offline-algorithms.md",
    "RLlib's guide end to end: PPO expert, record, clone, fine-tune":
        "guides/rllib-guide-end-to-end.md",
    "SAC: online, off-policy, and offline-to-online": "guides/sac.md",
    "Data on the devices, many devices, many hosts": "concepts/data-on-devices.md",
    "Add your own algorithm": "guides/custom-algorithm.md",
    "Off-policy evaluation: choose a checkpoint from logged data alone": "guides/ope.md",
    "The command line": "getting-started.md",
    "Minari datasets": "guides/minari-and-mujoco.md",
    "MuJoCo data sets made here (D4RL-style)": "guides/minari-and-mujoco.md",
    "Logging": "guides/logging.md",
    "Export": "guides/export.md",
    "Episodes": "concepts/episodes.md",
    "Connector pipelines": "concepts/connectors.md",
    "Recurrent and image policies, Atari, acting on the device": "guides/recurrent-and-image.md",
    "Data on disk": "guides/data-on-disk.md",
    "What happens with bad data and crashes": "guides/bad-data-and-crashes.md",
    "Libraries we chose, and why": "design-decisions.md",
    "Benchmarks": "benchmarks/index.md",
    "The MuJoCo scoreboard": "benchmarks/mujoco-scoreboard.md",
    "Parity with d3rlpy at convergence": "benchmarks/d3rlpy-parity.md",
    "CLI reference": "reference/cli.md",
    "Layout": "reference/layout.md",
}
# Generated at build time by scripts/mkdocs_hooks.py (not files under docs/).
GENERATED = re.compile(r"^(reference/api/.*|reference/config\.md|reference/errors\.md|"
                       r"tutorials/.*)$")


def headings(page: pathlib.Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # not code comments
    return {m.group(1).strip() for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def nav_pages(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [p for v in node.values() for p in nav_pages(v)]
    return [p for item in node for p in nav_pages(item)]


def mkdocs_config() -> dict:
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())


@pytest.mark.parametrize("heading", sorted(README_HEADINGS))
def test_every_old_readme_section_has_a_page(heading):
    page = DOCS / README_HEADINGS[heading]
    assert heading in headings(page), f"{heading!r} is no heading of docs/{page.name}"
    assert README_HEADINGS[heading] in nav_pages(mkdocs_config()["nav"])


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    nav = nav_pages(mkdocs_config()["nav"])
    written = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert not written - set(nav), f"pages missing from mkdocs.yml's nav: {written - set(nav)}"
    absent = {p for p in nav if p not in written and not GENERATED.match(p)}
    assert not absent, f"nav entries without a page: {absent}"


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.links.append(value)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                          str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stderr[-6000:]}"
    assert not re.search(r"^(WARNING|ERROR)", run.stderr, re.M), run.stderr[-6000:]
    return out


def built_path(page: str) -> str:
    """Where mkdocs (directory URLs) writes a page: `a/b.md` -> `a/b/index.html`."""
    stem = page.removesuffix(".md")
    return f"{stem}.html" if stem == "index" or stem.endswith("/index") else f"{stem}/index.html"


def test_site_builds_strict_with_every_page(site):
    for page in nav_pages(mkdocs_config()["nav"]):
        assert (site / built_path(page)).is_file(), f"{page} was not built"
    api = (site / "reference" / "api" / "episode" / "index.html").read_text()
    assert "get_observations" in api and "neg_index_as_lookback" in api
    config = (site / "reference" / "config" / "index.html").read_text()
    assert "train_batch_size_per_learner" in config and "td3_bc" in config


def inventory(site: pathlib.Path) -> set[str]:
    """The object names of the built site's `objects.inv` (what the API pages render)."""
    raw = (site / "objects.inv").read_bytes()
    body = zlib.decompress(raw.split(b"\n", 4)[4]).decode()
    return {line.split(" ", 1)[0] for line in body.splitlines() if line}


def test_every_declared_public_name_is_in_the_api_reference(site):
    """The packages `tests/test_api_docstrings.py` checks: each name of their `__all__` is an
    object the API pages render (found by mkdocstrings, so cross-references reach it)."""
    import importlib
    import inspect

    from test_api_docstrings import CHECKED

    rendered = inventory(site)
    for package in CHECKED:
        module = importlib.import_module(f"rljax_offline.{package}")
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                assert f"{obj.__module__}.{obj.__qualname__}" in rendered, (package, name)


def test_every_internal_link_of_the_built_site_resolves(site):
    broken = []
    for page in site.rglob("*.html"):
        parser = _Links()
        parser.feed(page.read_text())
        for link in parser.links:
            parts = urllib.parse.urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("#", "mailto:", "data:")):
                continue
            path = urllib.parse.unquote(parts.path)
            base = site if path.startswith("/") else page.parent  # 404.html links from root
            target = (base / path.lstrip("/")).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(site)} -> {link}")
    assert not broken, "broken internal links:\n" + "\n".join(sorted(set(broken))[:40])


def test_readme_links_reach_files():
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert any(link.startswith("docs/") for link in links)
    missing = [link for link in links if "://" not in link
               and not (ROOT / link.split("#")[0]).exists()]
    assert not missing, f"README links to missing files: {missing}"


def test_readme_is_short_and_keeps_the_two_commands_and_the_site_command():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python -m pip install -e . && rljax-offline demo" in readme
    test_command = 'python -m pip install -e ".[dev]" && ruff check . && python -m pytest -n 2 -q'
    assert test_command in readme
    for step in ('pip install -q -e ".[dev]"', "ruff check .", "python -m pytest -n 2 -q"):
        assert step in ci  # the README's test command is what CI runs
    assert 'pip install -e ".[docs]" && mkdocs serve' in readme
