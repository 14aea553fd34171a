"""Side-by-side check of locus MeanShift against scikit-learn.

Reads what `cargo run --release --example mean_shift_compare -- --out DIR`
wrote (DIR/<scenario>/data.npy, labels_<backend>.npy, modes_<backend>.npy,
DIR/times.tsv), runs scikit-learn's MeanShift on the same points with the
same settings, and prints its time, the ratio, and whether the clusters
agree (same partition, adjusted Rand index, largest distance between
matched modes). Needs numpy and scikit-learn (e.g. in a throwaway
virtualenv); the crate itself does not depend on Python.

    python benches/compare_sklearn.py DIR [--repeat R] [scenario ...]
"""

import sys
import time

import numpy as np
from sklearn.cluster import MeanShift
from sklearn.metrics import adjusted_rand_score

SETTINGS = {
    "all5k": dict(bin_seeding=False),
    "bin100k": dict(bin_seeding=True),
    "bin1m": dict(bin_seeding=True),
}


def same_partition(a, b):
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def main():
    args = sys.argv[1:]
    out = args.pop(0)
    repeat = 1
    if "--repeat" in args:
        i = args.index("--repeat")
        repeat = int(args[i + 1])
        del args[i : i + 2]
    times = {}
    for line in open(f"{out}/times.tsv"):
        sc, backend, t = line.split("\t")
        times[(sc, backend)] = float(t)
    for sc, kw in SETTINGS.items():
        if args and sc not in args:
            continue
        try:
            x = np.load(f"{out}/{sc}/data.npy")
        except FileNotFoundError:
            continue
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            ms = MeanShift(bandwidth=1.0, **kw).fit(x)
            best = min(best, time.perf_counter() - t0)
        print(f"{sc:9} sklearn n={len(x):8} modes={len(ms.cluster_centers_):3} "
              f"best of {repeat}: {best:.3f} s")
        for (s, backend), t in sorted(times.items()):
            if s != sc:
                continue
            labels = np.load(f"{out}/{sc}/labels_{backend}.npy")
            modes = np.load(f"{out}/{sc}/modes_{backend}.npy")
            dist = np.sqrt(((ms.cluster_centers_[:, None, :] - modes[None, :, :]) ** 2).sum(-1))
            gap = dist.min(axis=1).max() if len(modes) == len(ms.cluster_centers_) else float("nan")
            print(f"{'':9} locus {backend}: {t:.4f} s, {best / t:6.1f}x faster; "
                  f"same partition: {same_partition(labels, ms.labels_)}, "
                  f"ARI {adjusted_rand_score(labels, ms.labels_):.6f}, "
                  f"modes {len(modes)} vs {len(ms.cluster_centers_)}, largest mode gap {gap:.2e}")


if __name__ == "__main__":
    main()
