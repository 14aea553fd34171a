#!/usr/bin/env bash
# Every test of the project, as the README's set-up names it:
#   1. the Rust tests (cargo test --release: unit, integration, CLI, doc);
#   2. the Python package's tests (scripts/test-python.sh: a throwaway
#      virtualenv, the package built in release, pytest);
#   3. the GPU measurement script end to end at tiny sizes
#      (scripts/gpu-check.sh --dry-run), so it cannot rot between runs on
#      a real GPU.
# GPU tests need a Vulkan driver (Mesa's software one will do:
# apt-get install mesa-vulkan-drivers); with CI=true a missing adapter fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# Mesa's device-select layer warns on every process without XDG_RUNTIME_DIR.
export NODEVICE_SELECT=1

cargo test --release

if [ -f python/Cargo.toml ]; then
    scripts/test-python.sh
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if ! scripts/gpu-check.sh --dry-run --out "$out" >/dev/null; then
    cat "$out/gpu-check.log"
    echo "gpu-check dry run: FAILED"
    exit 1
fi
echo "gpu-check dry run: ok"
