"""The package's types are what runs: mypy's stubtest compares the stubs
of the compiled module, ``locus/_locus.pyi``, with the compiled
``locus._locus`` (every class, function and method with the same
parameters: names, kinds, defaults; nothing missing on either side; it
reads the compiled signatures from ``__text_signature__``, which PyO3
writes from each binding's ``signature``), and the annotations of the
Python modules with their runtime objects."""

import os
import subprocess
import sys

import pytest

# scikit-learn's metadata routing adds ``set_{method}_request`` methods to
# estimators when their classes are created: no annotation can name them.
ALLOWLIST = r"locus\..*\.set_\w+_request"


def _stubtest(tmp_path, *args, allow=()):
    try:
        import mypy.stubtest  # noqa: F401
    except ImportError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but mypy is missing: {e}")
        pytest.skip(f"SKIPPED: no mypy ({e})")
    # From an empty folder: mypy's cache goes there, and `locus` is the
    # package the tests import. scikit-learn and dask publish no types.
    (tmp_path / "mypy.ini").write_text("[mypy]\nignore_missing_imports = True\n")
    (tmp_path / "allow.txt").write_text("".join(f"{a}\n" for a in allow))
    return subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", *args, "--mypy-config-file", "mypy.ini",
         "--allowlist", "allow.txt"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )


def test_the_stubs_match_the_compiled_module(tmp_path):
    run = _stubtest(tmp_path, "locus._locus")
    assert run.returncode == 0, f"the stubs differ from the compiled module:\n{run.stdout}{run.stderr}"


def test_the_package_annotations_match_the_runtime(tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("distributed")
    run = _stubtest(tmp_path, "locus", allow=[ALLOWLIST])
    assert run.returncode == 0, f"annotations differ from the runtime:\n{run.stdout}{run.stderr}"
