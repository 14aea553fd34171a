"""locus from Python against scikit-learn, same data, same run.

    python benches/compare_python.py [--backends cpu,gpu] [--repeat R]
        [--kde-queries M] [--rust target/release/examples/keyset_latency]

Needs the package (`pip install './python[sklearn]'`). Measures:

* MeanShift, flat kernel, bandwidth 1.0, blobs in 2-D (8 centres, std
  0.6): every point a seed at N = 5000, bin seeding at N = 10^5;
  ``locus.MeanShift`` per backend against ``sklearn.cluster.MeanShift``,
  and whether the partitions agree.
* KernelDensity (gaussian, bandwidth 0.5) on N = 32768 points in d = 3:
  ``score_samples`` of M queries (default all N points) against
  scikit-learn's, and the largest relative difference of the densities.
* The cost of one Python ``KeySet.local_mean`` call with 16 queries
  (N = 10^5 keys, d = 8, gaussian, batching off) and, with ``--rust``, the
  same call timed in Rust by ``examples/keyset_latency.rs``.

Times are the best of R repeats (default 3; 1 for scikit-learn calls over
30 s). A table in Markdown goes to stdout.
"""

import argparse
import subprocess
import time

import numpy as np
from sklearn import cluster, neighbors
from sklearn.datasets import make_blobs

import locus


def best(f, repeat):
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t)
        if times[-1] > 30:
            break
    return min(times), out


def same_partition(a, b):
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backends", default="cpu")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kde-queries", type=int, default=32768)
    ap.add_argument("--rust", default=None, help="path of the keyset_latency example binary")
    ap.add_argument("--skip-sklearn-kde", action="store_true")
    a = ap.parse_args()
    backends = a.backends.split(",")
    engines = {b: locus.Engine(b) for b in backends}
    for b, e in engines.items():
        print(f"<!-- {b}: {e.info()['description']} -->")
    rows = []

    for name, n, bin_seeding in [("MeanShift all seeds", 5000, False), ("MeanShift bin seeding", 100_000, True)]:
        x, _ = make_blobs(n_samples=n, n_features=2, centers=8, cluster_std=0.6, random_state=42)
        x32 = x.astype(np.float32)
        t_sk, ref = best(lambda: cluster.MeanShift(bandwidth=1.0, bin_seeding=bin_seeding).fit(x32), a.repeat)
        for b, e in engines.items():
            t, ours = best(
                lambda: locus.MeanShift(bandwidth=1.0, bin_seeding=bin_seeding, backend=b).fit(x32), a.repeat
            )
            agree = same_partition(ours.labels_, ref.labels_)
            rows.append((f"{name}, N = {n}", b, t, t_sk, f"same partition: {agree}"))

    rng = np.random.default_rng(0)
    x = rng.normal(size=(32768, 3)).astype(np.float32)
    q = x[: a.kde_queries]
    kde_sk = neighbors.KernelDensity(bandwidth=0.5).fit(x)
    t_sk, want = (float("nan"), None)
    if not a.skip_sklearn_kde:
        t_sk, want = best(lambda: kde_sk.score_samples(q), 1)
    for b in backends:
        kde = locus.KernelDensity(bandwidth=0.5, backend=b).fit(x)
        t, got = best(lambda: kde.score_samples(q), a.repeat)
        dev = "n/a" if want is None else f"max rel. diff {np.max(np.abs(np.expm1(got - want))):.1e}"
        rows.append((f"KDE score_samples, N = 32768, M = {len(q)}, d = 3", b, t, t_sk, dev))

    keys = rng.uniform(size=(100_000, 8)).astype(np.float32)
    values = rng.uniform(size=(100_000, 1)).astype(np.float32)
    queries = rng.uniform(size=(16, 8)).astype(np.float32)
    calls = 2000
    for b, e in engines.items():
        ks = e.prepare(keys, values, batching=False)
        for _ in range(calls // 10):
            ks.local_mean(queries, bandwidth=0.5)
        times = []
        for _ in range(calls):
            t = time.perf_counter()
            ks.local_mean(queries, bandwidth=0.5)
            times.append(time.perf_counter() - t)
        py_us = np.median(times) * 1e6
        rust = ""
        if a.rust:
            out = subprocess.run(
                [a.rust, "--backend", b, "--n", "100000", "--d", "8", "--m", "16", "--calls", str(calls)],
                capture_output=True, text=True, check=True,
            ).stdout
            rust_us = float(out.split("median=")[1].split()[0])
            rust = f"Rust {rust_us:.1f} µs, Python adds {py_us - rust_us:+.1f} µs"
        rows.append(("KeySet.local_mean, 16 queries, N = 10^5, d = 8 (median)", b, py_us / 1e6, float("nan"), rust))

    print("| case | backend | locus (s) | scikit-learn (s) | speed-up | check |")
    print("|---|---|---|---|---|---|")
    for case, b, t, t_sk, note in rows:
        speed = "" if np.isnan(t_sk) else f"{t_sk / t:.1f}×"
        sk = "" if np.isnan(t_sk) else f"{t_sk:.3f}"
        shown = f"{t * 1e6:.1f} µs" if t < 1e-3 else f"{t:.3f}"
        print(f"| {case} | {b} | {shown} | {sk} | {speed} | {note} |")


if __name__ == "__main__":
    main()
