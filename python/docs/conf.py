"""Sphinx configuration of the locus-engine documentation.

Built by ``scripts/test-python.sh`` with warnings as errors against the
installed package (never the source tree)::

    sphinx-build -W --keep-going -b html python/docs <out>

The API reference is generated from the package's numpydoc docstrings
(autosummary + numpydoc, whose validation below fails the build on an
undocumented public object or parameter); the gallery runs every
``python/examples/plot_*.py`` (sphinx-gallery, matplotlib's Agg backend).
"""

from __future__ import annotations

import os
from pathlib import Path

# Mesa's device-select layer warns on every process without XDG_RUNTIME_DIR.
os.environ.setdefault("NODEVICE_SELECT", "1")

import matplotlib  # noqa: E402

import locus  # noqa: E402

matplotlib.use("Agg")

here = Path(__file__).resolve().parent

project = "locus-engine"
author = "the locus authors"
copyright = "the locus authors"
release = locus.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "auto_examples/*.ipynb", "auto_examples/*.py", "**.zip"]
root_doc = "index"
default_role = "literal"

# API reference: one page per public object, members listed by the
# templates in _templates/autosummary.
autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {"members": True}
autodoc_typehints = "none"
autodoc_member_order = "groupwise"

# numpydoc: the Parameters/Returns sections rendered; its validation turns
# a public object without a docstring (GL08), a parameter left out (PR01)
# or documented but not in the signature (PR02), and a value returned but
# not described (RT01) into warnings, which -W makes errors.
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True
numpydoc_xref_param_type = False
numpydoc_validation_checks = {"GL08", "PR01", "PR02", "RT01"}
numpydoc_validation_exclude = {
    # Named tuples: their fields are documented one by one, as attributes
    # (no one builds them but the package).
    r"^locus\.(KNNResult|RowStates|LocalPCAResult|MeanShiftResult|MedoidShiftResult|GenerateResult|PerFeatureBandwidths)(\.\w+)?$",
    # Made by Engine.prepare / prepare_attention, never by their constructor.
    r"^locus\.(KeySet|AttentionSet)$",
}
# Constructors that are not public: shown without a signature.
_NO_SIGNATURE = {"locus.KeySet", "locus.AttentionSet"}

sphinx_gallery_conf = {
    "examples_dirs": str(here.parent / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "ignore_pattern": r"__init__\.py",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "matplotlib_animations": False,
    "image_scrapers": ("matplotlib",),
    # Every example must run: an error fails the build.
    "abort_on_example_error": False,
    "only_warn_on_example_error": False,
    "plot_gallery": "True",
    # "Examples using X" on each API page.
    "doc_module": ("locus",),
    "backreferences_dir": "generated/backreferences",
}



def _skip_member(app, what, name, obj, skip, options):
    """Methods an estimator inherits from scikit-learn (``get_params``,
    ``score``, ``set_output``, the metadata-routing setters made per class,
    …) are scikit-learn's, documented there: the pages list locus's own."""
    if name.startswith("set_") and name.endswith("_request"):
        return True
    if getattr(obj, "__module__", None) and obj.__module__.startswith("sklearn."):
        return True
    return None


def _signature(app, what, name, obj, options, signature, return_annotation):
    """No constructor signature for the classes only the package builds."""
    if what == "class" and name in _NO_SIGNATURE:
        return ("", None)
    return None


def setup(app):
    app.connect("autodoc-skip-member", _skip_member)
    app.connect("autodoc-process-signature", _signature)


html_theme = "alabaster"
html_static_path: list[str] = []
html_title = f"locus-engine {release}"
html_theme_options = {
    "description": "Localization methods on the GPU (wgpu) and the CPU (rayon), "
    "with scikit-learn-compatible estimators",
    "fixed_sidebar": True,
}
