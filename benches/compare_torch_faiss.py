"""The locus CLI against PyTorch (CPU), faiss-cpu and numpy, same data, same run.

    python benches/compare_torch_faiss.py [--locus target/release/locus]
        [--repeat R] [--parts localmean,knn,lowd,attention,decode]
        [--dims 3,64,256,784] [--quick]

The peers are not dependencies of the crate; put them in a throwaway
virtualenv, e.g.

    python -m venv /tmp/peers
    /tmp/peers/bin/pip install numpy faiss-cpu
    /tmp/peers/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu
    /tmp/peers/bin/python benches/compare_torch_faiss.py --quick

Data are generated with numpy (fixed seeds, float32) and written as .npy to
a temporary directory. locus runs as a subprocess with ``--backend cpu``:
its time is the wall time of the whole process, reading the .npy files and
writing the result included (the user's view); the compute time that the
CLI reports itself (``--json``) is shown next to it. Peers are timed warm
(one untimed call first), compute only. Times are the best of R repeats
(default 3). Parts:

* localmean: gaussian local mean, M = N = 8192 (queries = keys = X ~ N(0, 1)),
  q = 4 values, h = sqrt(d), against torch
  ``softmax(-cdist(Qc, X)^2 / 2h^2) @ Y`` over chunks of 1024 queries.
* knn: k = 16, 1024 queries (data points plus noise of 0.01) against faiss
  ``IndexFlatL2`` (index built and searched once before timing); when the
  Python package is importable, also a prepared ``locus`` key set's
  ``knn`` (keys packed once, as faiss's index holds them), warm.
* lowd: d = 3 gaussian local mean, M = N = 32768, h in {0.05, 0.2, 1.0},
  against numpy chunked BLAS (|q|^2 - 2 q.x + |x|^2) + exp.
* attention: softmax attention, 8 heads, T = 4096, d = 64, scale 1/sqrt(d),
  ``locus softmax`` on (B, T, d) inputs (one independent head per leading
  index) against ``torch.nn.functional.scaled_dot_product_attention``,
  without and with the causal mask; on a CPU with AVX-512 the AVX2 build
  (``LOCUS_CPU_ISA=avx2``) runs too, so both builds are in one table. Where
  the Python package is importable, ``locus.kernel_softmax`` on the same
  arrays is timed in-process as torch is (warm, no files), a row of its own.
* decode: 16 new queries per head against a prepared attention set
  (``Engine("cpu").prepare_attention``, the Python package; skipped without
  it) of the same 8 × 4096 keys and values, against SDPA on the same
  tensors, per call, best of 20 warm calls.

The machine line names the CPU, its vector extensions and the path locus
takes on it (``locus info``): results from different machine kinds belong
in separate tables. Where ``target/release/examples/fma_ceiling`` is built
(``cargo build --release --example fma_ceiling``; or ``--fma-ceiling
PATH``), the machine's fp32 FMA ceiling (every core running independent
FMA chains, best of 5) is measured first and last, and the attention
table's GFLOP/s are also given as a share of it: the most any
implementation, locus or a peer, can reach on this machine.

Agreement: local means and attention outputs within 1e-4 of max|values|
(max abs. difference / max |Y|); kNN: the sorted distance lists within 1e-5
relative to each row's k-th distance (faiss's squared distances come from
|q|^2 + |x|^2 - 2 q.x in fp32, whose rounding error near a small distance
can exceed that; the float64 check below then decides). Identical index
lists are reported, not required (near ties may swap). Where locus and a peer disagree, a float64
reference on 256 sampled queries says which side is off; the exit status is
1 if locus is beyond tolerance of the peer and of that reference. A
Markdown report goes to stdout.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from report import cpu_isa, cpu_model, table

ROOT = Path(__file__).resolve().parent.parent
CORES = os.cpu_count() or 1
LM_TOL, KNN_TOL = 1e-4, 1e-5


def best(f, repeat, warm=True):
    if warm:
        f()
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t)
    return min(times), out


def run_locus(locus, args, repeat, env=None):
    """Best wall time of the whole process, and best compute time it reports
    (`env`: extra environment variables)."""
    walls, computes = [], []
    full = None if env is None else {**os.environ, **env}
    for _ in range(repeat):
        t = time.perf_counter()
        p = subprocess.run([locus, *args, "--backend", "cpu", "--json", "-q"], capture_output=True, text=True,
                           env=full)
        walls.append(time.perf_counter() - t)
        if p.returncode != 0:
            sys.exit(f"locus {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
        computes.append(json.loads(p.stdout)["seconds"])
    return min(walls), min(computes)


def local_mean_f64(q, x, y, h):
    """Exact gaussian local means in float64 (for a sample of queries)."""
    q, x, y = q.astype(np.float64), x.astype(np.float64), y.astype(np.float64)
    d2 = np.maximum((q * q).sum(1)[:, None] - 2 * q @ x.T + (x * x).sum(1)[None, :], 0)
    lw = -d2 / (2 * h * h)
    w = np.exp(lw - lw.max(1, keepdims=True))
    return (w @ y) / w.sum(1, keepdims=True)


def judge(ours, peer, ref_fn, sample, scale, tol):
    """(text, ok): locus vs the peer, and vs float64 on `sample` rows if they differ."""
    dev = float(np.max(np.abs(ours - peer))) / scale
    if dev <= tol:
        return f"{dev:.1e}", True
    ref = ref_fn(sample)
    ref_ours = float(np.max(np.abs(ours[sample] - ref))) / scale
    ref_peer = float(np.max(np.abs(peer[sample] - ref))) / scale
    return f"{dev:.1e} (vs f64: locus {ref_ours:.1e}, peer {ref_peer:.1e})", ref_ours <= tol


def part_localmean(a, tmp, fails):
    import torch
    torch.set_num_threads(CORES)
    n, rows = 8192 // a.div, []
    for d in a.dims:
        rng = np.random.default_rng(d)
        x = rng.normal(size=(n, d)).astype(np.float32)
        y = rng.normal(size=(n, 4)).astype(np.float32)
        h = float(np.sqrt(d))
        np.save(f"{tmp}/x.npy", x), np.save(f"{tmp}/y.npy", y)
        t_l, c_l = run_locus(a.locus, ["local-mean", "--keys", f"{tmp}/x.npy", "--values", f"{tmp}/y.npy",
                                       "--bandwidth", repr(h), "-o", f"{tmp}/lm.npy"], a.repeat)
        ours = np.load(f"{tmp}/lm.npy")
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)

        def peer():
            with torch.no_grad():
                return torch.cat([torch.softmax(-torch.cdist(xt[i:i + 1024], xt) ** 2 / (2 * h * h), dim=1) @ yt
                                  for i in range(0, n, 1024)]).numpy()

        t_p, want = best(peer, a.repeat)
        sample = np.random.default_rng(1).choice(n, min(256, n), replace=False)
        text, ok = judge(ours, want, lambda s: local_mean_f64(x[s], x, y, h), sample, float(np.abs(y).max()), LM_TOL)
        if not ok:
            fails.append(f"localmean d={d}: {text}")
        rows.append((f"{d}", f"{n}", f"{h:.3g}", f"{t_l:.3f} ({c_l:.3f})", f"{t_p:.3f}", f"{t_p / t_l:.2f}",
                     text + ("" if ok else " **FAIL**")))
    table("Gaussian local mean, M = N, q = 4, h = sqrt(d): locus vs torch (cdist + softmax, chunks of 1024)",
          ["d", "M = N", "h", "locus s, wall (compute)", "torch s", "torch/locus", "max diff / max abs Y"], rows)


def part_knn(a, tmp, fails):
    import faiss
    try:
        import locus
    except ImportError:
        locus = None
    faiss.omp_set_num_threads(CORES)
    k, m, rows = 16, 1024 // a.div, []
    for d, n in ((16, 65536), (128, 65536), (784, 16384)):
        n //= a.div
        rng = np.random.default_rng(100 + d)
        x = rng.normal(size=(n, d)).astype(np.float32)
        q = (x[rng.choice(n, m, replace=False)] + 0.01 * rng.normal(size=(m, d))).astype(np.float32)
        np.save(f"{tmp}/x.npy", x), np.save(f"{tmp}/q.npy", q)
        t_l, c_l = run_locus(a.locus, ["knn", "--keys", f"{tmp}/x.npy", "--queries", f"{tmp}/q.npy", "--k", str(k),
                                       "-o", f"{tmp}/i.npy", "--distances", f"{tmp}/d.npy"], a.repeat)
        idx, dist = np.load(f"{tmp}/i.npy"), np.load(f"{tmp}/d.npy").astype(np.float64)
        index = faiss.IndexFlatL2(d)
        index.add(x)
        t_f, (fd, fi) = best(lambda: index.search(q, k), a.repeat)
        # Like faiss's index, a prepared key set (the Python package, when
        # it is installed): keys read, transposed and packed once.
        t_k = None
        if locus is not None:
            ks = locus.Engine("cpu").prepare(x)
            t_k, (_, ki) = best(lambda: ks.knn(q, k), a.repeat)
            if not np.array_equal(ki, idx):
                fails.append(f"knn d={d}: the key set's lists differ from the CLI's")
        fd = np.sqrt(np.maximum(fd.astype(np.float64), 0))
        same = float(np.mean(np.all(idx == fi, axis=1)))
        scale = np.maximum(np.maximum(dist[:, -1:], fd[:, -1:]), 1e-30)
        dev = float(np.max(np.abs(np.sort(dist, 1) - np.sort(fd, 1)) / scale))
        # float64 distances of the indices each side returned: who is closer to exact?
        exact = lambda i: np.sqrt(((q.astype(np.float64)[:, None, :] - x.astype(np.float64)[i]) ** 2).sum(-1))
        e_l = float(np.max(np.abs(dist - exact(idx)) / scale))
        e_f = float(np.max(np.abs(fd - exact(fi)) / scale))
        ok = dev <= KNN_TOL or e_l <= KNN_TOL
        if not ok:
            fails.append(f"knn d={d} N={n}: distances differ by {dev:.1e} (locus vs f64 {e_l:.1e})")
        fl = 2.0 * m * n * d / 1e9
        keyset = "-" if t_k is None else f"{t_k:.3f} ({t_f / t_k:.2f}, {fl / t_k:.1f})"
        rows.append((f"{d}", f"{n}", f"{m}", f"{t_l:.3f} ({c_l:.3f})", f"{t_f:.3f}", f"{t_f / t_l:.2f}",
                     keyset, f"{fl / t_l:.1f} ({fl / c_l:.1f})", f"{fl / t_f:.1f}", f"{same:.4f}",
                     f"{dev:.1e} " + ("ok" if dev <= KNN_TOL else "(faiss off; locus ok vs f64)" if ok else "**FAIL**"),
                     f"{e_l:.1e} / {e_f:.1e}"))
    table(f"kNN, k = {k}: locus vs faiss IndexFlatL2 (search only)",
          ["d", "N", "M", "locus s, wall (compute)", "faiss s", "faiss/locus",
           "locus key set s (faiss/key set, GFLOP/s)", "locus GFLOP/s wall (compute)",
           "faiss GFLOP/s", "rows with identical indices", "distances max rel. diff",
           "vs f64: locus / faiss"], rows)


def part_lowd(a, tmp, fails):
    n, rows = 32768 // a.div, []
    rng = np.random.default_rng(3)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = rng.normal(size=(n, 4)).astype(np.float32)
    np.save(f"{tmp}/x.npy", x), np.save(f"{tmp}/y.npy", y)
    xx = (x * x).sum(1)
    for h in (0.05, 0.2, 1.0):
        t_l, c_l = run_locus(a.locus, ["local-mean", "--keys", f"{tmp}/x.npy", "--values", f"{tmp}/y.npy",
                                       "--bandwidth", repr(h), "-o", f"{tmp}/lm.npy"], a.repeat)
        ours = np.load(f"{tmp}/lm.npy")

        def peer():
            out = np.empty((n, 4), np.float32)
            for i in range(0, n, 1024):
                qc = x[i:i + 1024]
                lw = -np.maximum((qc * qc).sum(1)[:, None] - 2 * qc @ x.T + xx[None, :], 0) / np.float32(2 * h * h)
                w = np.exp(lw - lw.max(1, keepdims=True))
                out[i:i + 1024] = (w @ y) / w.sum(1, keepdims=True)
            return out

        t_p, want = best(peer, a.repeat)
        sample = np.random.default_rng(2).choice(n, min(256, n), replace=False)
        text, ok = judge(ours, want, lambda s: local_mean_f64(x[s], x, y, h), sample, float(np.abs(y).max()), LM_TOL)
        if not ok:
            fails.append(f"lowd h={h}: {text}")
        rows.append((f"{h}", f"{n}", f"{t_l:.3f} ({c_l:.3f})", f"{t_p:.3f}", f"{t_p / t_l:.2f}",
                     f"{n * n / t_l / 1e9:.2f} ({n * n / c_l / 1e9:.2f})", text + ("" if ok else " **FAIL**")))
    table("Gaussian local mean in d = 3, M = N, q = 4: locus vs numpy (BLAS distances + exp, chunks of 1024)",
          ["h", "M = N", "locus s, wall (compute)", "numpy s", "numpy/locus", "locus 1e9 pairs/s wall (compute)",
           "max diff / max abs Y"], rows)


def locus_path(locus, env=None):
    """The CPU path `locus info` reports (e.g. avx512+avx2+fma)."""
    out = subprocess.run([locus, "info"], capture_output=True, text=True,
                         env=None if env is None else {**os.environ, **env}).stdout
    for line in out.splitlines():
        if line.startswith("cpu backend"):
            return line.rsplit(", ", 1)[-1].rstrip(")")
    return "?"


def fma_ceiling(a):
    """The fp32 FMA ceiling in GFLOP/s (the wider of zmm and ymm), or None."""
    if not a.fma_ceiling or not os.access(a.fma_ceiling, os.X_OK):
        return None
    out = subprocess.run([a.fma_ceiling], capture_output=True, text=True).stdout.strip().splitlines()
    try:
        j = json.loads(out[-1])
    except (IndexError, ValueError):
        return None
    widths = [g for g in (j.get("zmm_gflops"), j.get("ymm_gflops")) if g]
    return max(widths) if widths else None


def part_attention(a, tmp, fails):
    import torch
    torch.set_num_threads(CORES)
    b, t, d = 8, 4096 // a.div, 64
    rng = np.random.default_rng(4)
    qkv = [rng.normal(size=(b, t, d)).astype(np.float32) for _ in range(3)]
    for name, arr in zip("qkv", qkv):
        np.save(f"{tmp}/{name}.npy", arr)
    qt, kt, vt = (torch.from_numpy(z) for z in qkv)
    # (environment, the path locus reports under it), asked once each.
    builds = [(None, locus_path(a.locus))]
    if "avx512" in builds[0][1]:
        env = {"LOCUS_CPU_ISA": "avx2"}
        builds.append((env, locus_path(a.locus, env)))
    try:
        import locus as lib
    except ImportError:
        lib = None
        print("\n(attention: the locus Python package is not installed; no in-process rows)")
    rows = []
    for causal in (False, True):
        def peer():
            with torch.no_grad():
                return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).numpy()

        t_p, want = best(peer, a.repeat)

        def ref(s):  # float64 on head 0, sampled queries
            lw = qkv[0][0, s].astype(np.float64) @ qkv[1][0].T.astype(np.float64) / np.sqrt(d)
            if causal:
                lw = np.where(np.arange(t)[None, :] <= s[:, None], lw, -np.inf)
            w = np.exp(lw - lw.max(1, keepdims=True))
            return (w @ qkv[2][0].astype(np.float64)) / w.sum(1, keepdims=True)

        for env, path in builds:
            t_l, c_l = run_locus(a.locus, ["softmax", "--phi", f"{tmp}/q.npy", "--psi", f"{tmp}/k.npy",
                                           "--values", f"{tmp}/v.npy", "-o", f"{tmp}/o.npy"]
                                 + (["--causal"] if causal else []), a.repeat, env)
            ours = np.load(f"{tmp}/o.npy")
            sample = np.random.default_rng(5).choice(t, min(256, t), replace=False)
            dev = float(np.max(np.abs(ours - want))) / float(np.abs(qkv[2]).max())
            ok, text = dev <= LM_TOL, f"{dev:.1e}"
            if not ok:
                text, ok = judge(ours[0], want[0], ref, sample, float(np.abs(qkv[2]).max()), LM_TOL)
                text = f"{dev:.1e}; head 0: " + text
                if not ok:
                    fails.append(f"attention causal={causal}: {text}")
            # Causal: the multiply-adds of the unmasked half.
            fl = 4.0 * b * t * t * d / 1e9 / (2 if causal else 1)
            rows.append(("yes" if causal else "no", path, f"{b}", f"{t}", f"{d}",
                         f"{t_l:.3f} ({c_l:.3f})", f"{t_p:.3f}", f"{t_p / t_l:.2f} ({t_p / c_l:.2f})",
                         f"{fl / t_l:.1f} ({fl / c_l:.1f})", f"{fl / t_p:.1f}", text + ("" if ok else " **FAIL**")))
        # In-process, as torch is timed: the Python package on the same
        # arrays (no .npy files, no process start).
        if lib is not None:
            t_y, ours = best(lambda: lib.kernel_softmax(*qkv, causal=causal, backend="cpu"), a.repeat)
            dev = float(np.max(np.abs(ours - want))) / float(np.abs(qkv[2]).max())
            ok = dev <= LM_TOL
            if not ok:
                fails.append(f"attention in-process causal={causal}: {dev:.1e}")
            rows.append(("yes" if causal else "no", f"{builds[0][1]}, in-process (Python)", f"{b}", f"{t}",
                         f"{d}", f"{t_y:.3f}", f"{t_p:.3f}", f"{t_p / t_y:.2f}", f"{fl / t_y:.1f}",
                         f"{fl / t_p:.1f}", f"{dev:.1e}" + ("" if ok else " **FAIL**")))
    table("Softmax attention, fp32, scale 1/sqrt(d): locus softmax on (B, T, d) .npy vs torch "
          "scaled_dot_product_attention on (B, T, d) tensors (B independent heads, no projections)",
          ["causal", "locus build", "B", "T", "d", "locus s, wall (compute)", "torch s",
           "torch/locus wall (compute)", "locus GFLOP/s wall (compute)", "torch GFLOP/s",
           "max diff / max abs V"], rows)
    ceiling = fma_ceiling(a)
    if ceiling and a.ceiling_start:
        lo, hi = sorted((a.ceiling_start, ceiling))
        span = f"{hi:.0f}" if round(lo) == round(hi) else f"{lo:.0f}–{hi:.0f}"
        print(f"\n- fp32 FMA ceiling {span} GFLOP/s (at the start, after this part); as a share of "
              f"{hi:.0f}: " + "; ".join(
                  f"{r[1]}{' causal' if r[0] == 'yes' else ''}: locus {share(r[8], hi)}, torch {share(r[9], hi)}"
                  for r in rows))


def share(gflops, ceiling):
    """A table cell's GFLOP/s (the figure in brackets where there is one:
    the compute) as a percentage of ``ceiling``."""
    cell = gflops.split("(")[-1].rstrip(")")
    return f"{100 * float(cell) / ceiling:.0f} %"


def part_decode(a, tmp, fails):
    import torch
    torch.set_num_threads(CORES)
    try:
        import locus
    except ImportError:
        print("\n(decode: the locus Python package is not installed; skipped)")
        return
    b, t, d, rows = 8, 4096 // a.div, 64, []
    rng = np.random.default_rng(6)
    k, v = (rng.normal(size=(b, t, d)).astype(np.float32) for _ in range(2))
    kt, vt = torch.from_numpy(k), torch.from_numpy(v)
    aset = locus.Engine("cpu").prepare_attention(k, v)
    for m in (1, 16, 64):
        q = rng.normal(size=(b, m, d)).astype(np.float32)
        qt = torch.from_numpy(q)

        def peer():
            with torch.no_grad():
                return torch.nn.functional.scaled_dot_product_attention(qt, kt, vt).numpy()

        t_p, want = best(peer, 20)
        t_l, ours = best(lambda: aset.attend(q), 20)
        dev = float(np.max(np.abs(ours - want))) / float(np.abs(v).max())
        ok = dev <= LM_TOL
        if not ok:
            fails.append(f"decode m={m}: {dev:.1e}")
        fl = 4.0 * b * m * t * d / 1e9
        rows.append((f"{b}", f"{m}", f"{t}", f"{d}", f"{t_l * 1e3:.3f}", f"{t_p * 1e3:.3f}", f"{t_p / t_l:.2f}",
                     f"{fl / t_l:.1f}", f"{fl / t_p:.1f}", f"{dev:.1e}" + ("" if ok else " **FAIL**")))
    table("Decoding: M new queries per head against prepared keys and values (locus AttentionSet.attend vs torch "
          "SDPA on the same tensors), per call, best of 20 warm calls",
          ["B", "M", "T", "d", "locus ms", "torch ms", "torch/locus", "locus GFLOP/s", "torch GFLOP/s",
           "max diff / max abs V"], rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--locus", default=str(ROOT / "target" / "release" / "locus"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--parts", default="localmean,knn,lowd,attention,decode")
    ap.add_argument("--dims", default="3,64,256,784", help="dimensions of the localmean part")
    ap.add_argument("--quick", action="store_true", help="N, M (and T) divided by 8: a smoke test")
    ap.add_argument("--fma-ceiling", default=str(ROOT / "target" / "release" / "examples" / "fma_ceiling"),
                    help="the fma_ceiling example's binary (skipped where absent)")
    a = ap.parse_args()
    a.dims = [int(s) for s in a.dims.split(",")]
    a.div = 8 if a.quick else 1
    parts = a.parts.split(",")
    unknown = set(parts) - {"localmean", "knn", "lowd", "attention", "decode"}
    if unknown:
        ap.error(f"unknown parts {sorted(unknown)}")
    if not os.access(a.locus, os.X_OK):
        ap.error(f"no locus binary at {a.locus} (cargo build --release)")

    versions = [f"numpy {np.__version__}"]
    for mod in ("torch", "faiss"):
        try:
            versions.append(f"{mod} {__import__(mod).__version__}")
        except ImportError:
            versions.append(f"{mod} not installed")
    locus_version = subprocess.run([a.locus, "--version"], capture_output=True, text=True).stdout.strip()
    print("## locus CLI vs PyTorch / faiss / numpy (CPU)\n")
    print(f"- machine: {cpu_model()} ({platform.machine()}), {CORES} cores, {platform.system()} {platform.release()}")
    print(f"- vector extensions: {cpu_isa()}; locus CPU path: {locus_path(a.locus)}")
    print(f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}")
    shown = os.path.relpath(a.locus, ROOT) if a.locus.startswith(str(ROOT)) else a.locus
    print(f"- {locus_version} ({shown}, --backend cpu); python {platform.python_version()}; {', '.join(versions)}")
    print(f"- command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(f"- best of {a.repeat}; locus wall = whole process incl. .npy I/O, (compute) = its own --json seconds;"
          f" peers warm, compute only{'; QUICK sizes (N, M, T / 8)' if a.quick else ''}")

    a.ceiling_start = fma_ceiling(a)
    if a.ceiling_start:
        print(f"- fp32 FMA ceiling at the start: {a.ceiling_start:.0f} GFLOP/s ({CORES} threads of independent FMA "
              "chains, best of 5: examples/fma_ceiling.rs)")
    fails = []
    with tempfile.TemporaryDirectory(prefix="locus-peers-") as tmp:
        for name, fn in (("localmean", part_localmean), ("knn", part_knn), ("lowd", part_lowd),
                         ("attention", part_attention), ("decode", part_decode)):
            if name in parts:
                fn(a, tmp, fails)
                sys.stdout.flush()
    if fails:
        print("\n**Disagreements beyond tolerance:**\n\n" + "\n".join(f"- {f}" for f in fails))
        sys.exit(1)


if __name__ == "__main__":
    main()
