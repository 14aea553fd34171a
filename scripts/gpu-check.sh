#!/usr/bin/env bash
# One-command GPU measurement for a machine with a GPU and no Rust
# toolchain or network: the release binary built elsewhere, Vulkan loader
# .deb files brought along, and the PyTorch already installed there.
#
#   scripts/gpu-check.sh [--dry-run] [--out DIR] [--debs DIR] [--bin PATH | PATH]
#
#   PATH / --bin  the x86-64 release binary (default: target/release/locus)
#   --debs DIR    .deb files unpacked with `dpkg -x` into / before anything
#                 runs, then `ldconfig` (default: .gl beside this folder, if
#                 it holds any)
#   --out DIR     where results go (default: $OUT, else ./gpu-check-out):
#                 gpu-check.json, gpu-check.md (the table), the log, and
#                 each part's own JSON
#   --dry-run     tiny sizes, a software adapter allowed, torch skipped
#                 when absent; checks the JSON it wrote (CI runs this)
#
# Parts: adapter (locus info), the bench at GPU sizes one op family at a
# time with a hardware adapter required (kNN split across keys, at d = 128
# by inner-product tiles (knn_ip.wgsl) since d ≥ 32 takes them, attention
# training and decoding shapes among them, and a key set's cell index
# beside the one-shot op over every key), cold and warm start, the same
# shapes through PyTorch (CUDA events after warm-up), then the report. Each part has its own
# time limit and a failure in one does not lose the others; the whole run
# stays inside 8½ minutes (at worst, every part at its limit).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
dry=0
out="${OUT:-./gpu-check-out}"
debs=""
bin=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) dry=1 ;;
        --out) out="${2:?--out needs a folder}"; shift ;;
        --debs) debs="${2:?--debs needs a folder}"; shift ;;
        --bin) bin="${2:?--bin needs a path}"; shift ;;
        -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
        -*) echo "gpu-check: unknown option $1" >&2; exit 2 ;;
        *) bin="$1" ;;
    esac
    shift
done
[ -n "$bin" ] || bin="$root/target/release/locus"
if [ ! -x "$bin" ]; then
    echo "gpu-check: no executable locus binary at $bin (build it with cargo build --release)" >&2
    exit 2
fi
if [ -z "$debs" ] && ls "$root"/.gl/*.deb >/dev/null 2>&1; then
    debs="$root/.gl"
fi
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
rm -f "$out"/part-*.status "$out"/bench-*.json "$out"/torch.json "$out"/info.json
exec > >(tee -a "$out/gpu-check.log") 2>&1

# Mesa's device-select layer and the runtime-dir warning stay out of the output.
export NODEVICE_SELECT=1
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
export PYTHONUNBUFFERED=1

# part NAME LIMIT_SECONDS COMMAND...: runs one part under a time limit and
# records its exit status and seconds in part-NAME.status.
part() {
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit}s)"
    local t0=$SECONDS
    timeout --kill-after=10 "$limit" "$@"
    local rc=$?
    echo "$rc $((SECONDS - t0))" >"$out/part-$name.status"
    [ "$rc" -eq 0 ] || echo "== $name failed (exit $rc)"
    return 0
}

echo "gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) binary=$bin out=$out dry_run=$dry"

if [ -n "$debs" ]; then
    echo "== unpacking $(ls "$debs"/*.deb 2>/dev/null | wc -l) loader packages from $debs"
    for f in "$debs"/*.deb; do
        [ -e "$f" ] && dpkg -x "$f" /
    done
    ldconfig
fi

hardware() {
    "$bin" info --json 2>/dev/null | python3 -c '
import json, sys
try:
    d = json.load(sys.stdin)
except ValueError:
    sys.exit(1)
sys.exit(0 if any(not a.get("software", True) for a in d.get("adapters", [])) else 1)'
}
if [ "$dry" -eq 0 ] && ! hardware && [ -z "${VK_DRIVER_FILES:-}" ]; then
    for icd in /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json \
        /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/local/share/vulkan/icd.d/nvidia_icd.json; do
        if [ -f "$icd" ]; then
            echo "== no hardware adapter found; trying VK_DRIVER_FILES=$icd"
            export VK_DRIVER_FILES=$icd
            egl=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
            [ -f "$egl" ] && export __EGL_VENDOR_LIBRARY_FILENAMES=$egl
            hardware && break
            unset VK_DRIVER_FILES
        fi
    done
fi

part info 30 bash -c '"$0" info && "$0" info --json >"$1/info.json"' "$bin" "$out"

if [ "$dry" -eq 1 ]; then
    size=tiny
    limit=120
    families="local-mean self-local-mean kernel-matrix kde knn attention mean-shift key-set"
else
    size=large
    limit=60
    families="local-mean attention mean-shift knn kernel-matrix key-set"
    export LOCUS_REQUIRE_HARDWARE=1
fi
for f in $families; do
    # The key-set pair is short (two local means at M = N = 10⁶, d = 2).
    flimit=$limit
    [ "$f" = key-set ] && [ "$dry" -eq 0 ] && flimit=30
    part "bench-$f" "$flimit" bash -c \
        '"$0" bench --size "$1" --ops "$2" --json >"$3/bench-$2.json.tmp" && mv "$3/bench-$2.json.tmp" "$3/bench-$2.json"' \
        "$bin" "$size" "$f" "$out"
    rm -f "$out/bench-$f.json.tmp"
done

# Cold and warm start: a GPU engine on an empty pipeline cache, then on
# the cache it wrote (the driver's own disk cache off, so the difference
# is the engine's cache alone).
part cold-start 30 bash -c \
    '__GL_SHADER_DISK_CACHE=0 "$0" bench --size tiny --backends gpu --ops local-mean,knn,attention,kernel-matrix --cold-start --json >"$1/cold-start.json"' \
    "$bin" "$out"

torch_args=(--bench-dir "$out" --out "$out/torch.json")
[ "$dry" -eq 1 ] && torch_args+=(--allow-cpu)
part torch 120 python3 "$here/gpu_check_torch.py" "${torch_args[@]}"

report_args=("$out")
[ "$dry" -eq 1 ] && report_args+=(--dry-run)
python3 "$here/gpu_check_report.py" "${report_args[@]}"
rc=$?
echo "gpu-check: results in $out (gpu-check.json, gpu-check.md)"
exit "$rc"
