"""The declared public API of the packages in CHECKED is documented: each package says what users
and algorithm authors may import (`__all__`), every name there resolves to an object defined in
a module an API page renders (its own package's, or another's it re-exports, such as
`errors`), and every public callable's
docstring names each of its parameters in Google style (`Args:`; a class's fields may be under
`Attributes:`). A new parameter without its line in `Args:` fails here. CHECKED grows package
by package as their docstrings are brought to the convention."""

import dataclasses
import importlib
import inspect
import pathlib
import sys

import griffe
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))

import docs_reference  # noqa: E402

CHECKED = ("export", "runtime", "learning", "envs", "models", "apps", "episode",
           "ope", "data", "connectors",
           "acting", "algorithms")


def documented_names(obj) -> set[str]:
    """The names in the docstring's Args / Parameters / Attributes / Other parameters sections
    (Google style, as griffe reads it for the API pages); the object's own docstring, not one
    inherited from a base class."""
    doc = inspect.cleandoc(obj.__doc__ or "")
    sections = griffe.Docstring(doc).parse("google", warnings=False)
    names = set()
    for section in sections:
        if section.kind.value in ("parameters", "attributes", "other parameters"):
            names |= {item.name for item in section.value}
    return names


def parameters(obj) -> list[str]:
    """What a caller passes: a function's parameters, a class's constructor parameters
    (a dataclass's or NamedTuple's fields), never `self`, `*args` or `**kwargs` (nor a flax
    module's `parent` and `name`, which flax adds to every module)."""
    if inspect.isclass(obj):
        if dataclasses.is_dataclass(obj):
            flax_module = any(c.__module__.startswith("flax.") for c in obj.__mro__[1:])
            # A config's options carry their own doc (`option(..., doc)`), listed in the
            # generated config reference, rather than one Args: line each.
            return [f.name for f in dataclasses.fields(obj) if f.init
                    and not (flax_module and f.name in ("parent", "name"))
                    and not f.metadata.get("doc")]
        if isinstance(getattr(obj, "_fields", None), tuple):  # NamedTuple
            return list(obj._fields)
        target = obj.__init__ if "__init__" in vars(obj) else None
        if target is None:
            return []
    else:
        target = obj
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return []
    skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [p.name for p in sig.parameters.values()
            if p.kind not in skip and p.name not in ("self", "cls")]


def undocumented(obj) -> list[str]:
    """The parameters of `obj` its docstring does not name."""
    if not (inspect.isclass(obj) or callable(obj)):
        return []
    named = documented_names(obj)
    if inspect.isclass(obj) and "__init__" in vars(obj):
        named |= documented_names(obj.__init__)
    return [p for p in parameters(obj) if p not in named]


def public_objects(package: str) -> dict[str, object]:
    module = importlib.import_module(f"{docs_reference.PACKAGE}.{package}")
    return {name: getattr(module, name) for name in module.__all__}


@pytest.mark.parametrize("package", CHECKED)
def test_package_declares_its_public_api(package):
    module = importlib.import_module(f"{docs_reference.PACKAGE}.{package}")
    assert isinstance(getattr(module, "__all__", None), list | tuple), f"{package}: no __all__"
    assert len(set(module.__all__)) == len(module.__all__) and module.__all__
    rendered = {f"{docs_reference.PACKAGE}.{m}" for m in docs_reference.API_MODULES}
    for other in docs_reference.API_PACKAGES:
        rendered |= set(docs_reference.public_modules(other))
    for name, obj in public_objects(package).items():
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__module__ in rendered, (
                f"{package}.{name} is defined in {obj.__module__}, which no API page renders")


@pytest.mark.parametrize("package", CHECKED)
def test_every_public_name_has_a_docstring_naming_its_parameters(package):
    missing, silent = {}, []
    for name, obj in public_objects(package).items():
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # constants: documented in their module's docstring
        if not inspect.getdoc(obj):
            silent.append(name)
        elif undocumented(obj):
            missing[name] = undocumented(obj)
    assert not silent, f"{package}: public names without a docstring: {silent}"
    assert not missing, (f"{package}: parameters not named in the docstring's Args: "
                         f"(or Attributes:) section: {missing}")


def test_the_check_fails_on_an_undocumented_parameter():
    def documented(env, seed=0):
        """Runs.

        Args:
          env: the env.
          seed: its seed.
        """

    def one_missing(env, seed=0, num_envs=1):
        """Runs.

        Args:
          env: the env.
          seed: its seed.
        """

    @dataclasses.dataclass
    class Fields:
        """A record.

        Attributes:
          a: the first.
        """

        a: int
        b: int

    assert undocumented(documented) == []
    assert undocumented(one_missing) == ["num_envs"]
    assert undocumented(Fields) == ["b"]
