"""The stubs of the compiled module, ``locus/_locus.pyi``, are what the
compiled ``locus._locus`` is: every class, function and method with the
same parameters (names, kinds, defaults), nothing missing on either side.
mypy's stubtest reads the compiled signatures (``__text_signature__``, which
PyO3 writes from each binding's ``signature``) and compares them with the
stubs."""

import os
import subprocess
import sys

import pytest


def test_the_stubs_match_the_compiled_module(tmp_path):
    try:
        import mypy.stubtest  # noqa: F401
    except ImportError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but mypy is missing: {e}")
        pytest.skip(f"SKIPPED: no mypy ({e})")
    # From an empty folder: mypy's cache goes there, and `locus` is the
    # package the tests import.
    run = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "locus._locus"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, f"the stubs differ from the compiled module:\n{run.stdout}{run.stderr}"
