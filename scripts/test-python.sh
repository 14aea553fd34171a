#!/usr/bin/env bash
# The Python package's tests: a throwaway virtualenv, maturin, numpy,
# scikit-learn, dask[distributed], pyarrow, pytest and mypy (whose stubtest checks the
# compiled module's stubs) from the package index, the package built in
# release (into the workspace's target/, so a rerun only rebuilds what
# changed) and installed from its wheel, then pytest on python/tests.
# The `locus` binary is built too (cargo build --release --bin locus) and
# passed to the tests as LOCUS_BIN: python/tests/test_serve_schema.py
# fuzzes a running `locus serve` against its OpenAPI description
# (schemathesis, openapi-spec-validator), test_client.py queries one.
# mypy checks the package's own code first; the documentation (python/docs:
# the API reference from the installed package's docstrings, and the
# gallery python/examples, every example run) is built last, with Sphinx's
# warnings as errors.
# Exits non-zero when anything fails; the virtualenv is removed either way.
#
#   scripts/test-python.sh [pytest arguments]
#
#   PYTHON   the interpreter to use (default: python3; CPython >= 3.10)
#   LOCUS_DOCS_OUT  keep the built HTML documentation in this folder
#                   (default: built in the throwaway virtualenv, removed)
#   LOCUS_BIN  the `locus` binary the service tests run (test_client.py,
#            test_serve_schema.py; default: built here, target/release/locus)
#   CI=true  GPU tests fail, rather than skip, when there is no adapter, the
#            stub test when mypy is missing, and the service tests when
#            there is no binary
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
python=${PYTHON:-python3}
start=$(date +%s)

venv=$(mktemp -d "${TMPDIR:-/tmp}/locus-python-test.XXXXXX")
trap 'rm -rf "$venv"' EXIT

echo "== virtualenv in $venv"
"$python" -m venv "$venv"
py="$venv/bin/python"
"$py" -m pip install --quiet --disable-pip-version-check --no-input \
    "maturin>=1.9,<2" numpy scikit-learn statsmodels "dask[distributed]" pandas pyarrow pytest mypy \
    schemathesis openapi-spec-validator \
    -r python/docs/requirements.txt

echo "== building the package (release)"
"$venv/bin/maturin" build --release --quiet --manifest-path python/Cargo.toml \
    --interpreter "$py" --out "$venv/wheels" </dev/null
"$py" -m pip install --quiet --disable-pip-version-check --no-input --no-deps \
    "$venv"/wheels/*.whl

if [ -z "${LOCUS_BIN:-}" ]; then
    echo "== building the locus binary (release) for test_client.py"
    cargo build --release --quiet --bin locus </dev/null
    LOCUS_BIN="$root/target/release/locus"
fi
export LOCUS_BIN

echo "== mypy (configured in python/pyproject.toml)"
(cd python && "$py" -m mypy)

echo "== pytest"
# Mesa's device-select layer warns on every process without XDG_RUNTIME_DIR.
export NODEVICE_SELECT=1
# From the tests' folder, so `import locus` is the installed package.
(cd python/tests && "$py" -m pytest -q -p no:cacheprovider "$@")

echo "== docs (sphinx-build -W: API reference, gallery examples run)"
# From a copy of python/docs and python/examples, so that the generated
# pages and the gallery's output never land in the checkout.
docs=$(cd "$venv" && pwd)/docs
mkdir -p "$docs"
cp -R python/docs python/examples "$docs/"
rm -rf "$docs/docs/generated" "$docs/docs/auto_examples" "$docs/docs/_build"
out=${LOCUS_DOCS_OUT:-$docs/html}
docs_start=$(date +%s)
MPLBACKEND=Agg "$venv/bin/sphinx-build" -W --keep-going -q -b html "$docs/docs" "$out"
echo "== docs built in $(($(date +%s) - docs_start)) s: $out/index.html"
echo "== python tests passed in $(($(date +%s) - start)) s"
