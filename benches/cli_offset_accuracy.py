"""Accuracy of the locus CLI on points far from the origin, against float64.

    python benches/cli_offset_accuracy.py [--locus target/release/locus] [--seed S]

Needs numpy only. For kNN (k = 10, N = 5000 keys, M = 500 queries,
x = offset + N(0, 1), d = 2 and 8) it prints the share of indices equal to
a float64 brute force's, with the points given as a float32 file (rounded
before the CLI sees them) and as a float64 file (centred on the keys'
mean in float64, then rounded). For the keys' own gaussian local mean of
2000 points in a 100 m square at UTM-like coordinates (500 000 m east,
4 649 776 m north, h = 10 m), the largest error in metres, float32 `.npy`
against CSV text.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

import numpy as np


def run(locus: str, *args: str) -> None:
    subprocess.run([locus, *args, "--backend", "cpu", "--quiet"], check=True)


def knn_share(locus: str, tmp: Path, rng: np.random.Generator, offset: float, d: int) -> dict[str, float]:
    n, m, k = 5000, 500, 10
    x = offset + rng.normal(size=(n, d))
    q = offset + rng.normal(size=(m, d))
    d2 = ((q[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    want = np.argsort(d2, axis=1, kind="stable")[:, :k]
    share = {}
    for dtype in (np.float32, np.float64):
        tag = np.dtype(dtype).name
        np.save(tmp / f"x-{tag}.npy", x.astype(dtype))
        np.save(tmp / f"q-{tag}.npy", q.astype(dtype))
        out = tmp / f"i-{tag}.npy"
        run(locus, "knn", "--keys", str(tmp / f"x-{tag}.npy"), "--queries", str(tmp / f"q-{tag}.npy"),
            "--k", str(k), "--output", str(out))
        share[tag] = float((np.load(out) == want).mean())
    return share


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--locus", default="target/release/locus")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        print("| kNN k = 10, x = offset + N(0, 1) | d | float32 file | float64 file |")
        print("|---|---|---|---|")
        for offset in (1e3, 1e5, 1e7):
            for d in (2, 8):
                s = knn_share(a.locus, tmp, rng, offset, d)
                print(f"| offset {offset:g} | {d} | {100 * s['float32']:.1f} % | {100 * s['float64']:.1f} % |")
        x = np.array([500_000.0, 4_649_776.0]) + rng.uniform(0, 100, size=(2000, 2))
        h = 10.0
        w = np.exp(-((x[:, None, :] - x[None, :, :]) ** 2).sum(-1) / (2 * h * h))
        want = (w @ x) / w.sum(1, keepdims=True)
        np.save(tmp / "u.npy", x.astype(np.float32))
        np.savetxt(tmp / "u.csv", x, delimiter=",", fmt="%.17g")
        print()
        print("| local mean of the keys, UTM-like | output dtype | largest error (m) |")
        print("|---|---|---|")
        for src in ("u.npy", "u.csv"):
            out = tmp / f"m-{src}.npy"
            run(a.locus, "local-mean", "--keys", str(tmp / src), "--bandwidth", str(h), "--output", str(out))
            got = np.load(out)
            err = np.abs(got.astype(np.float64) - want).max()
            print(f"| {'float32 .npy' if src.endswith('npy') else 'CSV text'} | {got.dtype} | {err:.3g} |")


if __name__ == "__main__":
    main()
