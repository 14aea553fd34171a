"""The cost of a product kernel on the CPU: the same gaussian kernel as a
radial kernel and as a product of two gaussian blocks, and a uniform x
gaussian product, for the local mean.

    python benches/compare_product_kernel.py [--n 20000] [--dims 5,16] [--repeat 3]

Needs numpy and the locus Python package (``maturin develop`` in python/).
Data: N normal points in d dimensions (seed 0), 2 value columns; queries =
keys (M = N); bandwidth 0.8 (the uniform block: 2.0). Times: the call,
best of ``--repeat`` after one untimed call, same process; the ratio is
product time / radial time. The radial gaussian and the gaussian x gaussian
product are the same kernel: their largest difference on 200 queries is
printed as a check.
"""

import argparse
import time

import numpy as np

import locus


def best(f, repeat):
    f()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--dims", default="5,16")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    e = locus.Engine("cpu")
    print("| d | radial gaussian | product gaussian x gaussian (same kernel) | product / radial "
          "| uniform x gaussian | max abs difference product vs radial |")
    print("|---|---|---|---|---|---|")
    for d in (int(v) for v in a.dims.split(",")):
        n = a.n
        x = rng.normal(size=(n, d)).astype(np.float32)
        y = rng.normal(size=(n, 2)).astype(np.float32)
        h = 0.8
        tr = best(lambda: locus.local_mean(x, x, y, bandwidth=h, kernel="gaussian", backend=e), a.repeat)
        kp = locus.ProductKernel([(2, "gaussian", h), (d - 2, "gaussian", h)])
        tp = best(lambda: locus.local_mean(x, x, y, kernel=kp, backend=e), a.repeat)
        ku = locus.ProductKernel([(2, "uniform", 2.0), (d - 2, "gaussian", h)])
        tu = best(lambda: locus.local_mean(x, x, y, kernel=ku, backend=e), a.repeat)
        r = locus.local_mean(x[:200], x, y, bandwidth=h, kernel="gaussian", backend=e)
        p = locus.local_mean(x[:200], x, y, kernel=kp, backend=e)
        print(f"| {d} | {tr:.3f} s | {tp:.3f} s | {tp / tr:.2f} | {tu:.3f} s | {np.abs(r - p).max():.1e} |")


if __name__ == "__main__":
    main()
