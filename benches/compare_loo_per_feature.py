"""Per-feature bandwidths by leave-one-out against statsmodels'
``KernelReg(var_type="c"*d, reg_type="lc", bw="cv_ls")`` on scikit-learn's
diabetes data (standardized features and target; the first ``--n`` of
its 442 rows), first 4 and all 10 features.

    python benches/compare_loo_per_feature.py [--dims 4,10] [--n 442] [--repeat 3] [--backend cpu]

Needs numpy, scikit-learn, statsmodels and the locus Python package.
statsmodels' gaussian product kernel is the radial gaussian
``exp(−Σ_a (Δ_a/h_a)²/2)`` with a diagonal metric (its constants cancel
in the local mean) and cv_ls minimizes the same leave-one-out squared
error, so both bandwidth vectors are scored by one float64 reference
(numpy, below). Times: locus's fit (``select_bandwidths_per_feature``),
best of ``--repeat`` after one untimed call; statsmodels' fit once (it
takes seconds to minutes); the ratio is statsmodels / locus, same process.
"""

import argparse
import time

import numpy as np
from sklearn.datasets import load_diabetes
from statsmodels.nonparametric.api import KernelReg

import locus


def ref_loo(X, y, h):
    u = (X[:, None, :] - X[None, :, :]) / np.asarray(h, dtype=np.float64)
    k = np.exp(-0.5 * (u**2).sum(-1))
    np.fill_diagonal(k, 0.0)
    m = (k @ y) / k.sum(1)
    return float(np.mean((y - m) ** 2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dims", default="4,10")
    ap.add_argument("--n", type=int, default=442)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backend", default="cpu")
    a = ap.parse_args()
    X, y = load_diabetes(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    y = (y - y.mean()) / y.std()
    X, y = X[: a.n], y[: a.n]
    e = locus.Engine(a.backend)
    print(f"n = {len(X)}")
    print("| d | LOO error locus | LOO error statsmodels | locus fit (s) | statsmodels fit (s) "
          "| statsmodels / locus | locus iterations |")
    print("|---|---|---|---|---|---|---|")
    for d in (int(v) for v in a.dims.split(",")):
        Xd = X[:, :d]

        def fit():
            return locus.select_bandwidths_per_feature(Xd, y, backend=e)

        r = fit()
        ts = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            fit()
            ts.append(time.perf_counter() - t0)
        t_locus = min(ts)
        t0 = time.perf_counter()
        bw = KernelReg(y, Xd, var_type="c" * d, reg_type="lc", bw="cv_ls").bw
        t_sm = time.perf_counter() - t0
        e_ours = ref_loo(Xd, y, r.bandwidths)
        e_sm = ref_loo(Xd, y, np.abs(bw))
        print(f"| {d} | {e_ours:.6f} | {e_sm:.6f} | {t_locus:.4f} | {t_sm:.2f} | "
              f"{t_sm / t_locus:.0f}x | {r.n_iter} |")
        print(f"<!-- d={d} locus h={np.round(r.bandwidths, 4).tolist()} "
              f"statsmodels h={np.round(np.abs(bw), 4).tolist()} -->")


if __name__ == "__main__":
    main()
