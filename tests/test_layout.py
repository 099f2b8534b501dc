"""The site's Layout page (docs/reference/layout.md) lists every file of `rljax_offline/` with
its one concern, and no file that is gone: a file added, moved or deleted fails here until the
page says so."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = "rljax_offline"


def layout_tree() -> dict[str, str]:
    """{path under the repository: concern} from the fenced tree of the Layout page."""
    page = (ROOT / "docs" / "reference" / "layout.md").read_text()
    block = re.search(r"```\n(.*?)```", page, re.S).group(1)
    listed, folders = {}, []  # folders: the open folder at each indent level
    for line in block.splitlines():
        if not line.strip() or not (line.startswith(f"{PACKAGE}/") or line.startswith(" ")):
            continue  # the closing "tests/  notebooks/ ..." line
        indent = (len(line) - len(line.lstrip())) // 2
        name, _, concern = line.strip().partition(" ")
        del folders[indent:]
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
            continue
        listed["/".join([*folders, name])] = concern.strip()
    return listed


def test_layout_section_lists_every_file_and_no_stale_one():
    tree = {p.relative_to(ROOT).as_posix() for p in (ROOT / PACKAGE).rglob("*.py")}
    listed = layout_tree()
    missing = sorted(tree - set(listed))
    stale = sorted(set(listed) - tree)
    assert not missing and not stale, (
        "docs/reference/layout.md is out of date; add each missing file with its one "
        f"concern, drop each stale one.\n  missing (in the tree, not listed): {missing}\n"
        f"  stale (listed, not in the tree): {stale}")


def test_every_listed_file_says_its_concern():
    silent = sorted(path for path, concern in layout_tree().items() if not concern)
    assert not silent, f"files listed in docs/reference/layout.md without their concern: {silent}"
