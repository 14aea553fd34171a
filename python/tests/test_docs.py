"""The examples in the docstrings run and give what they show."""

import doctest
import importlib

import pytest

MODULES = [
    "locus",
    "locus._errors",
    "locus._engine",
    "locus._functions",
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
    elif name not in ("locus", "locus._errors", "locus._engine", "locus._functions"):
        pytest.importorskip("sklearn")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
    if name != "locus":
        assert result.attempted > 0, f"no examples in {name}"
