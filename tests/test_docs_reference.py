"""The site's generated references follow the code: every option of every registered algorithm is
in the config reference with its default and what its check accepts, a newly registered
algorithm appears with no page written, every error class is in the error reference with the
exit code the CLI gives it, and every public package has an API page."""

import dataclasses
import pathlib
import sys

import pytest

from rljax_offline import errors
from rljax_offline.algorithms import registry
from rljax_offline.algorithms.config import AlgorithmConfig
from rljax_offline.algorithms.options import option, positive_float
from rljax_offline.cli.main import exit_code

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))

import docs_reference  # noqa: E402


def section(page: str, heading: str) -> str:
    return page.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def option_row(table: str, name: str) -> str:
    rows = [row for row in table.splitlines() if row.startswith("| `") and f"| `{name}` |" in row]
    assert len(rows) == 1, f"option {name!r}: {len(rows)} rows"
    return rows[0]


@pytest.mark.parametrize("name", registry.names())
def test_every_option_of_every_algorithm_is_in_the_config_reference(name):
    page = docs_reference.config_reference()
    cls = registry.config_class(name)
    own, shared = section(page, name), section(page, "Shared options")
    fields = docs_reference.option_fields(cls)
    assert len(fields) >= len(docs_reference.option_fields(AlgorithmConfig))
    for f in fields:
        changed = f in docs_reference.algorithm_options(cls, AlgorithmConfig)
        row = option_row(own if changed else shared, f.name)
        default = docs_reference._cell(docs_reference.default_text(f))
        assert f"| `{default}` |" in row, (name, f.name, row)
        assert f"`{f.metadata['group']}`" in row
        assert docs_reference._cell(f.metadata.get("doc", "")) in row


def test_checks_say_what_they_accept():
    assert docs_reference.check_text(positive_float) == "a finite number > 0"
    on_bad_file = AlgorithmConfig.__dataclass_fields__["on_bad_file"]
    assert docs_reference.check_text(on_bad_file.metadata["check"]) == "one of ['raise', 'skip']"
    assert docs_reference.check_text(None) == "any"


def test_a_newly_registered_algorithm_appears_without_a_page():
    @dataclasses.dataclass(frozen=True)
    class DocsProbeConfig(AlgorithmConfig):
        """A probe algorithm for the reference."""

        algo_name = "docs_probe"
        probe_rate: float = option(0.25, "training", positive_float, "how fast the probe probes")

    registry.register("docs_probe", DocsProbeConfig)
    try:
        page = docs_reference.config_reference()
    finally:
        registry._REGISTERED.pop("docs_probe")
    row = option_row(section(page, "docs_probe"), "probe_rate")
    assert "`0.25`" in row and "a finite number > 0" in row and "how fast the probe probes" in row
    assert "A probe algorithm for the reference." in page


def test_every_error_class_is_in_the_error_reference_with_its_exit_code():
    page = docs_reference.errors_reference()
    classes = [c for c in vars(errors).values()
               if isinstance(c, type) and issubclass(c, errors.RljaxError)]
    assert len(classes) > 15
    for c in classes:
        row = next(r for r in page.splitlines() if r.startswith(f"| [`{c.__name__}`]"))
        code = exit_code(docs_reference._instance(c))
        assert f"| {code} |" in row
    assert "| [`ConfigError`][rljax_offline.errors.ConfigError] | 2 |" in page
    assert "| [`OfflineDataError`][rljax_offline.errors.OfflineDataError] | 1 |" in page


def test_every_public_package_has_an_api_page():
    root = pathlib.Path(docs_reference.ROOT) / "rljax_offline"
    packages = {p.parent.name for p in root.glob("*/__init__.py")}
    assert packages == set(docs_reference.API_PACKAGES)  # a new package gets its page too
    pages = docs_reference.api_pages()
    for package in packages:
        page = pages[f"reference/api/{package}.md"]
        for module in docs_reference.public_modules(package):
            assert f"::: {module}\n" in page
