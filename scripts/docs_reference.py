"""The site's generated reference pages, made from the code at every `mkdocs build`
(`scripts/mkdocs_hooks.py` adds them), so a new registry entry, option, error or module shows up
without anyone writing a page:

- `config_reference()`: every registered algorithm's options from their `option(...)` metadata
  (group, name, default, check, doc);
- `errors_reference()`: the error hierarchy of `rljax_offline/errors.py` with the CLI's exit code
  of each;
- `api_pages()`: one mkdocstrings page per public package, one section per public module;
- `top_level_reference()`: what `import rljax_offline` exports and where each name is defined.

    python scripts/docs_reference.py config   # print a page (config, errors, top-level)
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pathlib
import pkgutil
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def this_checkout() -> None:
    """Puts this checkout first on `sys.path`, so the pages document its package and not
    another copy installed in editable mode (mkdocs restores `sys.path` after loading hooks,
    so this runs again at every use)."""
    sys.path[:] = [str(ROOT)] + [p for p in sys.path if p != str(ROOT)]
    loaded = sys.modules.get(PACKAGE)
    if loaded is not None and not str(loaded.__file__).startswith(str(ROOT)):
        raise RuntimeError(f"{PACKAGE} was imported from {loaded.__file__}, not from {ROOT}")


PACKAGE = "rljax_offline"
# The layers in the flow's order; a package not named here (a new one) follows them, so every
# package gets its API page. Modules whose names start with "_" are private.
LAYER_ORDER = ("episode", "data", "connectors", "models", "learning", "algorithms", "acting",
               "ope", "export", "envs", "runtime", "apps", "cli")
API_PACKAGES = tuple(sorted(
    (p.parent.name for p in (ROOT / PACKAGE).glob("*/__init__.py")),
    key=lambda name: (LAYER_ORDER.index(name) if name in LAYER_ORDER else len(LAYER_ORDER),
                      name)))
# Top-level modules that are no package: each is a section of the "core" page.
API_MODULES = ("errors", "spaces", "tree_util", "registry", "constants")


class _Probe:
    """A value no check accepts: a check returns what it expected, which the reference shows."""

    def __repr__(self) -> str:
        return "<probe>"


def check_text(check) -> str:
    """What `check` accepts, in its own words (`positive_float` -> "a finite number > 0")."""
    if check is None:
        return "any"
    try:
        said = check(_Probe())
    except Exception:  # noqa: BLE001 - a check that cannot take the probe is named instead
        said = None
    return said if isinstance(said, str) and said else getattr(check, "__name__", repr(check))


def default_text(field: dataclasses.Field) -> str:
    """The field's default as code (a factory is called, a function is named)."""
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "(required)"
    if callable(value) and hasattr(value, "__name__"):
        return value.__name__
    return repr(value)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _options_table(fields: list[dataclasses.Field]) -> list[str]:
    rows = ["| group | option | default | accepts | what |", "|---|---|---|---|---|"]
    for f in sorted(fields, key=lambda f: (f.metadata.get("group", ""), f.name)):
        meta = f.metadata
        what = meta.get("doc", "")
        if meta.get("ignored"):
            what = f"{what} (accepted, no effect here: {meta['ignored']})".strip()
        rows.append(f"| `{meta.get('group', '')}` | `{f.name}` | `{_cell(default_text(f))}` | "
                    f"{_cell(check_text(meta.get('check')))} | {_cell(what)} |")
    return rows


def option_fields(cls) -> list[dataclasses.Field]:
    """The config fields declared with `option(...)` (they carry a group)."""
    return [f for f in dataclasses.fields(cls) if "group" in f.metadata]


def algorithm_options(cls, base) -> list[dataclasses.Field]:
    """The options `cls` adds to `base` or whose default it changes."""
    shared = {f.name: default_text(f) for f in option_fields(base)}
    return [f for f in option_fields(cls)
            if f.name not in shared or shared[f.name] != default_text(f)]


def config_reference() -> str:
    """The config reference page: the options every algorithm shares, then each registered
    algorithm's own options and changed defaults."""
    this_checkout()
    from rljax_offline.algorithms import registry
    from rljax_offline.algorithms.config import AlgorithmConfig

    lines = ["# Config reference", "",
             "Generated from each config class's `option(default, group, check, doc)` "
             "declarations (`rljax_offline/algorithms/options.py`) by "
             "`scripts/docs_reference.py` at every build: an algorithm registered in "
             "`algorithms/registry.py` appears here with no page to write. Set an option "
             "through its group's method, as in RLlib: "
             "`BCConfig().training(lr=1e-3).offline_data(input_=\"data/\")`. A value that "
             "its check refuses is a one-line `ConfigError` naming the option and what it "
             "accepts (the \"accepts\" column).", ""]
    lines += ["## Algorithms", "", "| name (`--algo`) | config class | what |", "|---|---|---|"]
    classes = {name: registry.config_class(name) for name in registry.names()}
    for name, cls in classes.items():
        summary = inspect.getdoc(cls).split("\n\n")[0] if cls.__doc__ else ""
        lines.append(f"| [`{name}`](#{name}) | `{cls.__name__}` "
                     f"(`{cls.__module__}`) | {_cell(summary)} |")
    for name, cls in classes.items():
        own = algorithm_options(cls, AlgorithmConfig)
        lines += ["", f"## {name}", "",
                  f"`{cls.__module__}.{cls.__name__}`: the options it adds or whose default "
                  "differs from the [shared options](#shared-options); every shared option "
                  "applies too.", ""]
        lines += _options_table(own) if own else ["(No option of its own.)"]
    lines += ["", "## Shared options", "",
              "`AlgorithmConfig`'s options: every algorithm has them, with these defaults "
              "unless its own table above says otherwise.", ""]
    lines += _options_table(option_fields(AlgorithmConfig))
    return "\n".join(lines) + "\n"


def _instance(cls: type) -> BaseException:
    """An instance of `cls` whatever its constructor takes (for `isinstance` only)."""
    return type(f"_{cls.__name__}", (cls,), {"__init__": lambda self: None})()


def first_sentence(doc: str) -> str:
    """A docstring's first sentence (up to ". " or the first blank line)."""
    head = " ".join((doc or "").split("\n\n")[0].split())
    match = re.search(r"(?<=[a-z0-9)`'])\. (?=[A-Z`(])", head)
    return head[:match.start() + 1] if match else head


def errors_reference() -> str:
    """The error hierarchy under `RljaxError`, each class's builtin bases, docstring and the
    exit code the command line ends with when it is raised."""
    this_checkout()
    from rljax_offline import errors
    from rljax_offline.cli.main import exit_code

    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass)
               if issubclass(c, errors.RljaxError) and c.__module__ == errors.__name__]
    children: dict[type, list[type]] = {}
    for c in classes:
        for base in c.__bases__:
            if base in classes:
                children.setdefault(base, []).append(c)
    lines = ["# Errors and exit codes", "",
             "Every failure a user can cause is a named error under one root, "
             "`rljax_offline.errors.RljaxError`; `rljax_offline/errors.py` defines all of them "
             "(generated from that file by `scripts/docs_reference.py`). Each also derives "
             "from the builtin exception callers caught before (`ValueError`, "
             "`FileExistsError`, ...). The command line prints one line `error: ...` and "
             "exits with the code below (`RLJAX_DEBUG=1` re-raises instead); other "
             "exceptions exit 1, Ctrl-C 130, bad flags 2 (argparse). See also "
             "[what happens with bad data and crashes](../guides/bad-data-and-crashes.md).", "",
             "```text"]

    def tree(cls: type, depth: int) -> None:
        builtin = [b.__name__ for b in cls.__bases__ if b not in classes]
        extra = f" ({', '.join(builtin)})" if builtin and cls is not errors.RljaxError else ""
        lines.append(f"{'    ' * depth}{cls.__name__}{extra}")
        for child in sorted(children.get(cls, []), key=lambda c: c.__name__):
            tree(child, depth + 1)

    tree(errors.RljaxError, 0)
    lines += ["```", "", "| error | exit code | raised when |", "|---|---|---|"]
    for c in sorted(classes, key=lambda c: c.__name__):
        doc = inspect.getdoc(c) or ""
        code = exit_code(_instance(c))
        lines.append(f"| [`{c.__name__}`][rljax_offline.errors.{c.__name__}] | {code} | "
                     f"{_cell(doc.split(chr(10) + chr(10))[0])} |")
    return "\n".join(lines) + "\n"


def public_modules(package: str) -> list[str]:
    """The package's public modules (names without a leading "_"), depth first, sorted."""
    this_checkout()
    pkg = importlib.import_module(f"{PACKAGE}.{package}")
    found = []
    for info in pkgutil.walk_packages(pkg.__path__, prefix=f"{pkg.__name__}."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            found.append(info.name)
    return sorted(found)


def api_page(package: str) -> str:
    """One package's API page: its docstring, then each public module's members."""
    lines = [f"# `{PACKAGE}.{package}`", "", f"::: {PACKAGE}.{package}",
             "    options:", "      members: false", "      show_root_heading: false", ""]
    for module in public_modules(package):
        lines += [f"::: {module}", ""]
    return "\n".join(lines)


def core_page() -> str:
    lines = ["# Core modules", "",
             "The modules at the package's top level that every layer uses.", ""]
    for name in API_MODULES:
        lines += [f"::: {PACKAGE}.{name}", ""]
    return "\n".join(lines)


def api_pages() -> dict[str, str]:
    """{page path under docs/: its Markdown} of every API page."""
    pages = {f"reference/api/{p}.md": api_page(p) for p in API_PACKAGES}
    pages["reference/api/core.md"] = core_page()
    pages["reference/api/index.md"] = top_level_reference()
    return pages


def top_level_reference() -> str:
    """`import rljax_offline`'s public names, each linked to the module that defines it."""
    this_checkout()
    import rljax_offline

    lines = ["# API reference", "",
             "Everything a user needs is importable from the top level "
             "(`from rljax_offline import BCConfig, Episode, read_episodes`); the names below "
             "are `rljax_offline.__all__`, each linked to its definition. The pages in this "
             "section document each package module by module, generated from the docstrings "
             "by mkdocstrings.", "", "| name | defined in | what |", "|---|---|---|"]
    for name in sorted(rljax_offline.__all__):
        obj = getattr(rljax_offline, name)
        module = getattr(obj, "__module__", None)
        if module is None or not module.startswith(PACKAGE) or not hasattr(obj, "__name__"):
            lines.append(f"| `{name}` | | {_cell(type(obj).__name__)} |")
            continue
        doc = first_sentence(inspect.getdoc(obj))
        lines.append(f"| [`{name}`][{module}.{obj.__name__}] | `{module}` | {_cell(doc)} |")
    packages = ", ".join(f"[`{p}`]({p}.md)" for p in API_PACKAGES)
    lines += ["", f"Packages: {packages}; top-level modules: [core](core.md)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    page = sys.argv[1] if len(sys.argv) > 1 else "config"
    print({"config": config_reference, "errors": errors_reference,
           "top-level": top_level_reference}[page]())
