"""locus from Python against scikit-learn, same data, same run.

    python benches/compare_python.py [--backends cpu,gpu] [--repeat R]
        [--kde-queries M] [--parts meanshift,kde,keyset]
        [--rust target/release/examples/keyset_latency]

Needs the package (`pip install './python[sklearn]'`). Measures:

* MeanShift, flat kernel, bandwidth 1.0, blobs in 2-D (8 centres, std
  0.6): every point a seed at N = 5000, bin seeding at N = 10^5;
  ``locus.MeanShift`` per backend against ``sklearn.cluster.MeanShift``,
  and whether the partitions agree.
* KernelDensity (gaussian, bandwidth 0.5) on N = 32768 points in d = 3:
  ``score_samples`` of M queries (default all N points) against
  scikit-learn's, and the largest relative difference of the densities.
* The cost of one Python ``KeySet.local_mean`` call with 16 queries
  (N = 10^5 and 10^3 keys, d = 8, gaussian, batching off) and, with
  ``--rust``, the same call on the same numbers timed in Rust by
  ``examples/keyset_latency.rs`` (best median of 5 alternating rounds).

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


def partition_check(a, b):
    """"same partition", or how many points a cluster-to-cluster matching
    leaves on different sides (points on a boundary between two modes that
    agree only to the convergence tolerance may flip)."""
    pairs = set(zip(a.tolist(), b.tolist()))
    if len(pairs) == len(set(a.tolist())) == len(set(b.tolist())):
        return "same partition"
    counts = {}
    for p in zip(a.tolist(), b.tolist()):
        counts[p] = counts.get(p, 0) + 1
    matched = {}
    for (la, lb), c in sorted(counts.items(), key=lambda kv: -kv[1]):
        if la not in matched and lb not in matched.values():
            matched[la] = lb
    differ = sum(c for (la, lb), c in counts.items() if matched.get(la) != lb)
    return f"{differ} of {len(a)} points in another cluster"


def lcg_data(n, d, m):
    """Keys, values and queries from the generator of
    examples/keyset_latency.rs, so both sides compute on the same numbers."""
    state = 7
    out = np.empty(n * d + n + m * d, dtype=np.float32)
    for i in range(out.size):
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out[i] = (state >> 40) / float(1 << 24)
    keys = out[: n * d].reshape(n, d)
    values = out[n * d : n * d + n].reshape(n, 1)
    queries = out[n * d + n :].reshape(m, d)
    return keys, values, queries


def python_call_us(ks, queries, calls):
    """Median microseconds of one Python KeySet.local_mean call."""
    for _ in range(calls // 10):
        ks.local_mean(queries, bandwidth=0.5)
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        ks.local_mean(queries, bandwidth=0.5)
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backends", default="cpu")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kde-queries", type=int, default=32768)
    ap.add_argument("--rust", default=None, help="path of the keyset_latency example binary")
    ap.add_argument("--parts", default="meanshift,kde,keyset")
    a = ap.parse_args()
    backends = a.backends.split(",")
    engines = {b: locus.Engine(b) for b in backends}
    for b, e in engines.items():
        print(f"<!-- {b}: {e.info()['description']} -->")
    rows = []

    parts = a.parts.split(",")
    cases = [("MeanShift all seeds", 5000, False), ("MeanShift bin seeding", 100_000, True)]
    for name, n, bin_seeding in cases if "meanshift" in parts else []:
        x, _ = make_blobs(n_samples=n, n_features=2, centers=8, cluster_std=0.6, random_state=42)
        x32 = x.astype(np.float32)
        t_sk, ref = best(lambda: cluster.MeanShift(bandwidth=1.0, bin_seeding=bin_seeding).fit(x32), a.repeat)
        for b, e in engines.items():
            t, ours = best(
                lambda: locus.MeanShift(bandwidth=1.0, bin_seeding=bin_seeding, backend=b).fit(x32), a.repeat
            )
            check = partition_check(ours.labels_, ref.labels_)
            modes = len(ours.cluster_centers_), len(ref.cluster_centers_)
            rows.append((f"{name}, N = {n}", b, t, t_sk, f"{check}; {modes[0]} vs {modes[1]} modes"))

    rng = np.random.default_rng(0)
    x = rng.normal(size=(32768, 3)).astype(np.float32)
    q = x[: a.kde_queries]
    t_sk, want = (float("nan"), None)
    if "kde" in parts:
        kde_sk = neighbors.KernelDensity(bandwidth=0.5).fit(x)
        t_sk, want = best(lambda: kde_sk.score_samples(q), 1)
    for b in backends if "kde" in parts else []:
        kde = locus.KernelDensity(bandwidth=0.5, backend=b).fit(x)
        t, got = best(lambda: kde.score_samples(q), a.repeat)
        dev = f"max rel. diff {np.max(np.abs(np.expm1(got - want))):.1e}"
        rows.append((f"KDE score_samples, N = 32768, M = {len(q)}, d = 3", b, t, t_sk, dev))

    for n_keys in (100_000, 1000) if "keyset" in parts else ():
        keys, values, queries = lcg_data(n_keys, 8, 16)
        for b, e in engines.items():
            ks = e.prepare(keys, values, batching=False)
            # Rust and Python alternate, so that load from elsewhere hits both.
            py_us, rust_us = [], []
            for _ in range(5):
                py_us.append(python_call_us(ks, queries, 1000))
                if a.rust:
                    out = subprocess.run(
                        [a.rust, "--backend", b, "--n", str(n_keys), "--d", "8", "--m", "16",
                         "--calls", "1000"],
                        capture_output=True, text=True, check=True,
                    ).stdout
                    rust_us.append(float(out.split("median=")[1].split()[0]))
            py = min(py_us)
            note = ""
            if rust_us:
                rust = min(rust_us)
                note = f"Rust {rust:.1f} µs, Python adds {py - rust:+.1f} µs"
            case = f"KeySet.local_mean, 16 queries, N = {n_keys}, d = 8 (median)"
            rows.append((case, b, py / 1e6, float("nan"), note))

    print("| case | backend | locus (s) | scikit-learn (s) | speed-up | check |")
    print("|---|---|---|---|---|---|")
    for case, b, t, t_sk, note in rows:
        speed = "" if np.isnan(t_sk) else f"{t_sk / t:.1f}×"
        sk = "" if np.isnan(t_sk) else f"{t_sk:.3f}"
        shown = f"{t * 1e6:.1f} µs" if t < 0.01 else f"{t:.3f}"
        print(f"| {case} | {b} | {shown} | {sk} | {speed} | {note} |")


if __name__ == "__main__":
    main()
