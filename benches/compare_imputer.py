"""locus LocalMeanImputer against scikit-learn's KNNImputer on the digits data.

    python benches/compare_imputer.py [--seed S] [--fraction F] [--repeat R]
        [--val-seed V] [--val-fraction G] [--grid 0.25,0.35,0.5,0.7,1.0]
        [--ks 1,3,5,10,20] [--backend cpu]

Needs numpy and scikit-learn, and the locus Python package (``maturin
develop`` in python/) for the locus rows; the crate itself does not depend
on Python. Without ``locus.LocalMeanImputer`` the script says so, prints
the scikit-learn rows only and exits 0.

Data: scikit-learn's digits (``load_digits``, 1797 x 64, pixel values 0 to
16) as float32. ``--fraction`` (default 0.2) of all entries, drawn uniformly
without replacement (``--seed``, default 0), are set to NaN; their true
values are kept only for scoring. Every method imputes that masked matrix
(``fit_transform``: the training rows are the rows imputed) and is scored by
the RMSE over the removed entries, in pixel units.

Peers: ``KNNImputer(n_neighbors=k)`` for k = 5 and 10 (uniform weights) and
``k = 5, weights="distance"``; column-mean imputation (``SimpleImputer``)
as the floor any local method should beat.

locus: ``LocalMeanImputer(bandwidth=h, kernel="gaussian", iterations=i)``
for i = 1 and 2: each missing entry is the gaussian-weighted mean of that
coordinate over the rows that observe it, with weights exp(-r^2/2),
r = nan_euclidean distance / h (iterations=2 recomputes the distances on
the completed data and imputes again from the observed entries).

Fair tuning, without the true values of the removed entries: a further
``--val-fraction`` (default 0.05) of the *observed* entries is hidden
(``--val-seed``, default 1), each candidate imputes that doubly masked
matrix, and the candidate with the smallest RMSE on the hidden observed
entries is run on the real task. Candidates for h: c x m, c in ``--grid``,
m = the median nan_euclidean distance (``sklearn.metrics.pairwise.
nan_euclidean_distances`` on the masked matrix) from a row to its 5th
nearest other row; h is chosen separately for iterations=1 and 2.
KNNImputer's k is chosen over ``--ks`` by the same validation (uniform
weights) as an extra row. The sensitivity tables show the validation RMSE
and, for information only (never used to choose), the RMSE on the removed
entries at every candidate.

Check: each locus result is compared with a float64 numpy evaluation of the
same definition (sklearn's nan_euclidean distances, log-domain weights per
entry), as max |locus - numpy| in pixel units; it is reported, not gated.

Times: ``fit_transform`` on the masked matrix, fresh estimator, best of R
(default 3) after one untimed call, in this process; ratios are
KNNImputer(k=5) time / method time. A Markdown report goes to stdout. The
exit status is 1 only if locus is present but fails or returns a malformed
result.
"""

import argparse
import datetime
import os
import platform
import sys
import time
import traceback
from pathlib import Path

import numpy as np
from report import cpu_model, table

ROOT = Path(__file__).resolve().parent.parent
CORES = os.cpu_count() or 1
AGREE = 1e-2  # pixel units: max |locus - numpy f64| above this gets a note


def best(f, repeat, warm=True):
    if warm:
        f()
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t)
    return min(times), out


def floats(s):
    return [float(v) for v in s.split(",") if v.strip()]


def ints(s):
    return [int(v) for v in s.split(",") if v.strip()]


def hide(x, fraction, rng, among=None):
    """A boolean mask of round(fraction * candidates) entries drawn uniformly without
    replacement among the True entries of ``among`` (default: all)."""
    cand = np.flatnonzero(np.ones(x.shape, bool) if among is None else among)
    pick = rng.choice(cand, size=int(round(fraction * len(cand))), replace=False)
    mask = np.zeros(x.size, bool)
    mask[pick] = True
    return mask.reshape(x.shape)


def rmse(filled, truth, mask):
    d = np.asarray(filled, np.float64)[mask] - np.asarray(truth, np.float64)[mask]
    return float(np.sqrt(np.mean(d * d)))


def kth_neighbour_median(xm, k=5):
    """Median over rows of the nan_euclidean distance to the k-th nearest other row."""
    from sklearn.metrics.pairwise import nan_euclidean_distances

    d = nan_euclidean_distances(xm.astype(np.float64))
    np.fill_diagonal(d, np.inf)
    d = np.where(np.isnan(d), np.inf, d)
    return float(np.median(np.partition(d, k - 1, axis=1)[:, k - 1]))


def local_mean_impute_f64(xm, h, iterations, chunk=64):
    """Float64 reference of the definition: per missing (i, j) the mean of x_rj over the
    rows r observing j, weighted exp(-d_ir^2 / 2h^2) (d: nan_euclidean on the masked
    data, then euclidean on the completed data for later iterations), summed per entry
    in the log domain so a tiny h gives the nearest donor instead of 0/0."""
    from sklearn.metrics.pairwise import nan_euclidean_distances

    x = xm.astype(np.float64)
    obs = ~np.isnan(x)
    vals = np.where(obs, x, 0.0)
    cur = x
    for _ in range(iterations):
        d = nan_euclidean_distances(cur)
        logw = np.where(np.isnan(d), -np.inf, -(d * d) / (2.0 * h * h))
        out = x.copy()
        for s in range(0, len(x), chunk):
            lw = logw[s:s + chunk]                                            # c x N
            lwj = np.where(obs[None, :, :], lw[:, :, None], -np.inf)          # c x N x d
            top = lwj.max(axis=1, keepdims=True)                              # c x 1 x d
            w = np.exp(lwj - np.where(np.isfinite(top), top, 0.0))
            num, den = (w * vals[None]).sum(1), w.sum(1)
            with np.errstate(invalid="ignore", divide="ignore"):
                est = num / den
            miss = ~obs[s:s + chunk]
            out[s:s + chunk][miss] = est[miss]
        cur = out
    return cur


def locus_imputer():
    """(LocalMeanImputer class, locus module, None) or (None, None, why)."""
    try:
        import locus
    except ImportError as e:
        return None, None, f"`import locus` failed ({e.__class__.__name__}: {e})"
    if not hasattr(locus, "LocalMeanImputer"):
        return None, locus, (f"locus {getattr(locus, '__version__', '?')} ({locus.__file__}) has no"
                             " LocalMeanImputer: rebuild the Python package (maturin develop in python/)")
    return locus.LocalMeanImputer, locus, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0, help="seed of the removed entries (default 0)")
    ap.add_argument("--fraction", type=float, default=0.2, help="fraction of entries removed (default 0.2)")
    ap.add_argument("--val-seed", type=int, default=1, help="seed of the validation mask (default 1)")
    ap.add_argument("--val-fraction", type=float, default=0.05,
                    help="fraction of the observed entries hidden for validation (default 0.05)")
    ap.add_argument("--grid", type=floats, default=floats("0.25,0.35,0.5,0.7,1.0"),
                    help="bandwidth candidates as multiples of the median 5th-neighbour distance")
    ap.add_argument("--ks", type=ints, default=ints("1,3,5,10,20"), help="KNNImputer k candidates")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backend", default="cpu", help="locus backend (default cpu)")
    a = ap.parse_args()
    if not 0 < a.fraction < 1 or not 0 < a.val_fraction < 1:
        ap.error("--fraction and --val-fraction must be in (0, 1)")
    if not a.grid or min(a.grid) <= 0 or not a.ks or min(a.ks) < 1 or a.repeat < 1:
        ap.error("--grid needs positive values, --ks values >= 1, --repeat >= 1")

    import sklearn
    from sklearn.datasets import load_digits
    from sklearn.impute import KNNImputer, SimpleImputer

    Imputer, locus, why = locus_imputer()
    if Imputer is None:
        print(f"locus rows skipped: {why}; the scikit-learn rows follow", file=sys.stderr)
    versions = [f"python {platform.python_version()}", f"numpy {np.__version__}", f"scikit-learn {sklearn.__version__}"]
    if locus is not None:
        versions.append(f"locus {getattr(locus, '__version__', '?')} ({locus.__file__})")
    try:
        from threadpoolctl import threadpool_info
        blas = ", ".join(f"{p.get('internal_api')} {p.get('num_threads')} threads" for p in threadpool_info())
    except Exception:  # noqa: BLE001 -- informational only
        blas = "unknown"

    print("## locus LocalMeanImputer vs scikit-learn KNNImputer on digits (CPU)\n")
    print(f"- machine: {cpu_model()} ({platform.machine()}), {CORES} cores, {platform.system()} {platform.release()};"
          f" thread pools: {blas}")
    print(f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}")
    print(f"- {'; '.join(versions)}")
    print(f"- command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else None

    x = load_digits().data.astype(np.float32)
    removed = hide(x, a.fraction, np.random.default_rng(a.seed))
    xm = np.where(removed, np.float32(np.nan), x)
    val = hide(x, a.val_fraction, np.random.default_rng(a.val_seed), among=~removed)
    xv = np.where(val, np.float32(np.nan), xm)
    n, d = x.shape
    m5 = kth_neighbour_median(xm, 5)
    hs = [c * m5 for c in a.grid]
    print(f"- data: sklearn digits, {n} x {d}, float32, pixel values 0..16; {int(removed.sum())} entries"
          f" ({a.fraction:.0%}, seed {a.seed}) set to NaN and scored; validation: {int(val.sum())} further observed"
          f" entries ({a.val_fraction:.0%} of the observed, seed {a.val_seed}) hidden, scored only to choose h and k")
    print(f"- h grid: c x {m5:.3f} (median nan_euclidean distance to the 5th nearest other row of the masked data),"
          f" c in {{{', '.join(f'{c:g}' for c in a.grid)}}}; k grid {{{', '.join(map(str, a.ks))}}}")
    print(f"- times: fit_transform of the masked matrix, fresh estimator, best of {a.repeat} after one untimed call;"
          f" ratio = KNNImputer(k=5) time / method time (> 1: faster than KNNImputer k=5); locus backend"
          f" {a.backend!r}; KNNImputer gets the same float32 matrix")
    sys.stdout.flush()

    notes, failed = [], False

    def knn(k, weights="uniform"):
        return lambda z: KNNImputer(n_neighbors=k, weights=weights).fit_transform(z)

    def timed_row(label, fn):
        t, out = best(lambda: fn(xm), a.repeat)
        out = np.asarray(out)
        if out.shape != x.shape:
            raise RuntimeError(f"{label} returned shape {out.shape}, expected {x.shape}")
        return t, out

    # scikit-learn rows
    t_mean, out = timed_row("mean", lambda z: SimpleImputer(strategy="mean").fit_transform(z))
    results = [("column mean (SimpleImputer)", "strategy=\"mean\"", rmse(out, x, removed), t_mean, "")]
    t_knn5 = None
    for k, w in ((5, "uniform"), (10, "uniform"), (5, "distance")):
        t, out = timed_row(f"knn{k}{w}", knn(k, w))
        if (k, w) == (5, "uniform"):
            t_knn5 = t
        results.append(("KNNImputer", f"k={k}, weights=\"{w}\"", rmse(out, x, removed), t, ""))

    # KNNImputer, k chosen by validation
    k_rows, k_val = [], {}
    for k in a.ks:
        k_val[k] = rmse(knn(k)(xv), x, val)
    k_best = min(a.ks, key=lambda k: k_val[k])
    for k in a.ks:
        test = rmse(knn(k)(xm), x, removed)
        k_rows.append((f"**{k}**" if k == k_best else f"{k}", f"{k_val[k]:.4f}", f"{test:.4f}"))
    t, out = timed_row("knnbest", knn(k_best))
    results.append(("KNNImputer, k chosen by the same validation", f"k={k_best}, weights=\"uniform\"",
                    rmse(out, x, removed), t, ""))

    # locus rows
    h_rows = []
    if Imputer is None:
        notes.append(f"locus rows skipped: {why}")
    else:
        def lmi(h, it):
            return lambda z: Imputer(bandwidth=h, kernel="gaussian", iterations=it,
                                     backend=a.backend).fit_transform(z)

        def check(out, z, label):
            out = np.asarray(out)
            bad = []
            if out.shape != z.shape:
                bad.append(f"shape {out.shape}, expected {z.shape}")
            else:
                if out.dtype != np.float32:
                    bad.append(f"dtype {out.dtype}, expected float32")
                nn = int(np.isnan(out).sum())
                if nn:
                    bad.append(f"{nn} NaN left")
                seen = ~np.isnan(z)
                if not np.array_equal(out[seen], z[seen]):
                    bad.append(f"observed entries changed (max |diff| "
                               f"{float(np.max(np.abs(out[seen].astype(np.float64) - z[seen]))):.3g})")
            if bad:
                raise RuntimeError(f"locus {label}: " + "; ".join(bad))
            return out

        try:
            per_it = {}
            for it in (1, 2):
                vals = [rmse(check(lmi(h, it)(xv), xv, f"iterations={it}, h={h:.4g}, validation"), x, val)
                        for h in hs]
                tests = [rmse(check(lmi(h, it)(xm), xm, f"iterations={it}, h={h:.4g}"), x, removed) for h in hs]
                i_best = int(np.argmin(vals))
                per_it[it] = (vals, tests, i_best)
                h = hs[i_best]
                t, out = timed_row(f"locus{it}", lmi(h, it))
                check(out, xm, f"iterations={it}, h={h:.4g}")
                ref = local_mean_impute_f64(xm, h, it)
                gap = float(np.max(np.abs(out.astype(np.float64) - ref)[removed]))
                if gap > AGREE:
                    notes.append(f"locus iterations={it}, h={h:.4g}: max |locus - numpy f64| = {gap:.3g} pixel"
                                 f" units over the removed entries (RMSE of the numpy f64 evaluation:"
                                 f" {rmse(ref, x, removed):.4f})")
                results.append(("locus LocalMeanImputer, h chosen by validation",
                                f"gaussian, iterations={it}, h={h:.4g} (c={a.grid[i_best]:g})",
                                rmse(out, x, removed), t, f"{gap:.1e}"))
            for i, (c, h) in enumerate(zip(a.grid, hs)):
                cells = [f"{c:g}", f"{h:.4g}"]
                for it in (1, 2):
                    vals, tests, i_best = per_it[it]
                    v = f"{vals[i]:.4f}"
                    cells += [f"**{v}**" if i == i_best else v, f"{tests[i]:.4f}"]
                h_rows.append(cells)
        except Exception as e:  # noqa: BLE001 -- report, keep the scikit-learn rows
            failed = True
            notes.append(f"locus LocalMeanImputer failed: {e.__class__.__name__}: {e}")
            traceback.print_exc(file=sys.stderr)

    table(f"Imputation of {a.fraction:.0%} removed entries of sklearn digits ({n} x {d}): RMSE over the removed"
          " entries (pixel units, 0..16) and fit_transform time",
          ["method", "parameters", "RMSE", "fit_transform s", "KNNImputer(k=5) / method",
           "max abs diff vs numpy f64"],
          [(m, p, f"{r:.4f}", f"{t:.4f}", f"{t_knn5 / t:.2f}", g or "-") for m, p, r, t, g in results])
    if h_rows:
        table("locus: RMSE at every bandwidth candidate (validation: the hidden observed entries, used to choose h,"
              " chosen in bold; removed: the scored entries, for information only)",
              ["c", "h", "iterations=1 validation", "iterations=1 removed", "iterations=2 validation",
               "iterations=2 removed"], h_rows)
    table("KNNImputer (uniform weights): RMSE at every k candidate (validation chosen in bold; removed: for"
          " information only)", ["k", "validation", "removed"], k_rows)
    if load0 is not None:
        notes.append(f"load average (1 min) {load0:.2f} at the start, {os.getloadavg()[0]:.2f} at the end, on"
                     f" {CORES} cores: other work on the machine slows the timings")
    if notes:
        print("\nNotes:\n\n" + "\n".join(f"- {s}" for s in notes))
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
