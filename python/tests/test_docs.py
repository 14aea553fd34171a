"""The examples in the docstrings run and give what they show."""

import doctest
import importlib
from pathlib import Path

import pytest

MODULES = [
    "locus",
    "locus._errors",
    "locus._engine",
    "locus._functions",
    "locus._cluster_functions",
    "locus._generate",
    "locus._client",
    "locus._cluster",
    "locus._density",
    "locus._regression",
    "locus._classification",
    "locus._neighbors",
    "locus.distributed",
    "locus.distributed._merge",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name.startswith("locus.distributed"):
        pytest.importorskip("distributed")
    elif name not in ("locus", "locus._errors", "locus._engine", "locus._functions", "locus._cluster_functions",
                      "locus._generate", "locus._client"):
        pytest.importorskip("sklearn")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
    if name != "locus":
        assert result.attempted > 0, f"no examples in {name}"


# The documentation site (python/docs, python/examples) is built with
# warnings as errors by scripts/test-python.sh; these tests hold what that
# build cannot see by itself: that the API reference names every public
# object, and that the gallery and the build stay wired.
ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "python" / "docs"
EXAMPLES = ROOT / "python" / "examples"


def _autosummary_entries(rst: str) -> set[str]:
    """The names listed under the ``.. autosummary::`` directives of ``rst``,
    each with the ``currentmodule`` in force."""
    names, module, listing = set(), "", False
    for line in rst.splitlines():
        stripped = line.strip()
        if stripped.startswith(".. currentmodule::"):
            module = stripped.split("::", 1)[1].strip()
            listing = False
        elif stripped.startswith(".. autosummary::"):
            listing = True
        elif listing and line.startswith("   ") and stripped and not stripped.startswith(":"):
            names.add(f"{module}.{stripped}")
        elif listing and stripped and not line.startswith("   "):
            listing = False
    return names


def test_api_reference_names_every_public_object():
    import locus

    listed = _autosummary_entries((DOCS / "api.rst").read_text(encoding="utf-8"))
    public = {n for n in locus.__all__ if n != "__version__"} | set(locus._ESTIMATORS)
    wanted = {f"locus.{n}" for n in public}
    try:
        import locus.distributed as ld
    except ImportError:
        pass
    else:
        wanted |= {f"locus.distributed.{n}" for n in ld.__all__}
    missing = sorted(wanted - listed)
    assert not missing, f"python/docs/api.rst does not list {missing}"
    unknown = sorted(
        n for n in listed
        if not hasattr(importlib.import_module(n.rsplit(".", 1)[0]), n.rsplit(".", 1)[1])
    )
    assert not unknown, f"python/docs/api.rst lists what the package lacks: {unknown}"


def test_gallery_examples_are_runnable_scripts_with_a_title():
    examples = sorted(EXAMPLES.glob("plot_*.py"))
    assert len(examples) >= 5, f"only {len(examples)} gallery examples"
    assert (EXAMPLES / "README.rst").is_file()
    for path in examples:
        source = path.read_text(encoding="utf-8")
        compile(source, str(path), "exec")
        title = source.split('"""')[1].strip().splitlines()
        # sphinx-gallery's header: a title, its underline, then the text.
        assert len(title) > 2 and set(title[1]) == {"="}, f"{path.name}: no title"
        assert "import locus" in source, f"{path.name} does not use locus"


def test_docs_build_runs_in_the_python_test_script():
    script = (ROOT / "scripts" / "test-python.sh").read_text(encoding="utf-8")
    assert "-r python/docs/requirements.txt" in script
    assert 'sphinx-build" -W --keep-going' in script
    conf = (DOCS / "conf.py").read_text(encoding="utf-8")
    assert "numpydoc_validation_checks" in conf and "sphinx_gallery.gen_gallery" in conf
