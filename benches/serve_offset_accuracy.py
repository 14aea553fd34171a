"""Accuracy of `locus serve` (through `locus.Client`) on points far from the
origin, against float64.

    python benches/serve_offset_accuracy.py [--locus target/release/locus] [--seed S]

Needs numpy and the locus Python package (for its `Client`). Starts the
service on a free port, then for three data sets (N = 5000 keys, M = 500
queries, d = 2: `10⁵ + N(0, 1)`, `10⁷ + N(0, 1)`, and a 100 m square at
UTM-like coordinates, 500 000 m east, 4 649 776 m north, spread 50 m)
puts the keys with one value column and asks kNN (k = 10) and the
gaussian local mean, twice: keys and queries sent as float32 (rounded
before the service sees them, which is what it did with float64 points
before it centred them) and as float64 (the set centred on its keys'
mean, the queries moved by the same offset, then rounded). Prints the
share of kNN entries equal to a float64 brute force's and the largest
local-mean error against float64.
"""

from __future__ import annotations

import argparse
import subprocess
import threading
from pathlib import Path

import numpy as np

import locus

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--locus", default=str(ROOT / "target" / "release" / "locus"))
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    p = subprocess.Popen(
        [a.locus, "serve", "--port", "0", "--backend", "cpu", "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout is not None and p.stderr is not None
        line = p.stdout.readline()
        if not line.startswith("listening on http://"):
            raise SystemExit(f"locus serve did not start: {line!r}")
        for pipe in (p.stdout, p.stderr):
            threading.Thread(target=pipe.read, daemon=True).start()
        client = locus.Client(line.split()[-1])
        rng = np.random.default_rng(a.seed)
        cases = [
            ("10⁵ + N(0, 1)", np.array([1e5, 1e5]), 1.0, 0.3),
            ("10⁷ + N(0, 1)", np.array([1e7, 1e7]), 1.0, 0.3),
            ("UTM-like, 100 m square (h = 10 m)", np.array([500_000.0, 4_649_776.0]), 50.0, 10.0),
        ]
        print("| data, d = 2 | kNN entries equal to float64: float32 sent | float64 sent "
              "| local mean, largest error: float32 sent | float64 sent |")
        print("|---|---|---|---|---|")
        for name, origin, spread, h in cases:
            x = origin + spread * rng.standard_normal((5000, 2))
            y = np.sin((x[:, :1] - origin[0]) / spread).astype(np.float32)
            q = origin + spread * rng.standard_normal((500, 2))
            d2 = ((q[:, None, :] - x[None]) ** 2).sum(-1)
            want = np.sort(np.argsort(d2, axis=1)[:, :10], axis=1)
            w = np.exp(-d2 / (2 * h * h))
            mean = (w @ y.astype(np.float64)) / w.sum(1, keepdims=True)
            shares, errors = [], []
            for keys, queries in ((x.astype(np.float32), q.astype(np.float32)), (x, q)):
                client.put_set("s", keys, values=y)
                got = np.sort(client.knn("s", queries, 10).indices, axis=1)
                shares.append(float(np.mean(got == want)))
                lm = client.local_mean("s", queries, bandwidth=h, kernel="gaussian")
                errors.append(float(np.max(np.abs(lm - mean))))
            print(f"| {name} | {100 * shares[0]:.1f} % | {100 * shares[1]:.1f} % "
                  f"| {errors[0]:.2e} | {errors[1]:.2e} |")
    finally:
        p.kill()
        p.wait(timeout=10)


if __name__ == "__main__":
    main()
