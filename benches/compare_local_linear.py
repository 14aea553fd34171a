"""locus local linear regression (``local-mean --degree 1``) against statsmodels.

    python benches/compare_local_linear.py [--locus target/release/locus]
        [--repeat R] [--bandwidth H] [--tol 1e-4]

The peers are not dependencies of the crate; put them in a throwaway
virtualenv outside the repository, e.g.

    python -m venv /tmp/peers
    /tmp/peers/bin/pip install numpy statsmodels scikit-learn scipy
    /tmp/peers/bin/python benches/compare_local_linear.py

Data: scikit-learn's diabetes data set (``load_diabetes``, 442 rows,
features centred and scaled to unit norm, so their standard deviation is
about 0.048), target y (25 to 346). Two cases: d = 1 (``bmi``, column 2)
with h = 0.02 and d = 3 (``bmi``, ``bp``, ``s5``: columns 2, 3, 8) with
h = 0.04 (``--bandwidth`` sets one h for both). X and y are cast to float32
for locus; statsmodels gets the same float32 values as float64, so the
only difference is the computation. Queries are the training points.

statsmodels: ``KernelReg(y, X, var_type="c" * d, reg_type="ll",
bw=[h] * d).fit(X)``, which per query solves the kernel-weighted least
squares of ``y ~ a + b.(x_j - x)`` (``_est_loc_linear``, ``pinv`` of the
(d+1)x(d+1) moment matrix, in float64) and returns ``a`` (the mean) and
``b`` (the "marginal effects": the plain local slopes). Its continuous
kernel is the gaussian ``exp(-(x_j - x)^2 / 2h^2) / sqrt(2 pi)`` per
column; the product over d columns with one h is ``exp(-|x_j - x|^2 /
2h^2)`` up to a constant factor, which cancels in the weighted least
squares. That is locus's gaussian kernel ``exp(-r^2/2)``, r = |x_j - x| / h,
with the same h. A float64 numpy solve of the same problem (``lstsq`` on
the square-root-weighted design) checks that reading of statsmodels'
conventions, and is shown in parentheses as a second reference: with a
small h some local designs are nearly singular, and there statsmodels'
``pinv`` of the unscaled normal matrix (rcond 1e-15) truncates directions
that ``lstsq`` keeps, so its slopes (not its fitted values) part from both.

locus: the CLI as a subprocess, ``local-mean --keys X.npy --queries X.npy
--values Y.npy --kernel gaussian --bandwidth H --degree 1 --slopes S.npy
--backend cpu`` (Y: N x 1, output M x 1, slopes M x 1 x d). Its time is
the wall time of the whole process, .npy I/O and process start included;
the compute time it reports itself (``--json``) is shown next to it. When
the Python package is importable and ``locus.KernelRegression`` accepts
``degree=1``, its fit + predict is timed in-process too (skipped otherwise).
statsmodels' ``.fit`` and the Python package are timed warm (one untimed
call first). Times are the best of R repeats (default 3); ratios are
statsmodels time / locus time, measured in the same process.

Agreement: fitted values within ``--tol`` (default 1e-4) relative, max
|a - b| / max(|b|, tiny) over the queries; the slopes are reported as max
|a - b| / max |reference slope| (not gated). The exit status is 1 if the
fitted values of locus (CLI or Python package) are off by more than the
tolerance from statsmodels, unless statsmodels is the one beyond it from
the float64 solve and locus is within it (as in compare_torch_faiss.py).
A Markdown report goes to stdout.
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
import warnings
from pathlib import Path

import numpy as np
from report import cpu_model, table

ROOT = Path(__file__).resolve().parent.parent
CORES = os.cpu_count() or 1
TINY = 1e-30
# (name, diabetes columns, default bandwidth)
CASES = (("bmi", (2,), 0.02), ("bmi, bp, s5", (2, 3, 8), 0.04))


def best(f, repeat, warm=True):
    if warm:
        f()
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t)
    return min(times), out


def run_locus(locus, args, repeat):
    """Best wall time of the whole process, best compute time it reports, its last JSON summary."""
    walls, computes, report = [], [], None
    for _ in range(repeat):
        t = time.perf_counter()
        p = subprocess.run([locus, *args, "--backend", "cpu", "--json", "-q"], capture_output=True, text=True)
        walls.append(time.perf_counter() - t)
        if p.returncode != 0:
            sys.exit(f"locus {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
        report = json.loads(p.stdout)
        computes.append(report["seconds"])
    return min(walls), min(computes), report


def local_linear_f64(q, x, y, h):
    """Gaussian local linear fit in float64: per query the weighted least
    squares of y ~ a + b.(x - q); returns (a, b) as (M,), (M, d)."""
    q, x, y = q.astype(np.float64), x.astype(np.float64), y.astype(np.float64)
    diff = x[None, :, :] - q[:, None, :]                        # M x N x d
    w = np.exp(-(diff ** 2).sum(-1) / (2 * h * h))              # M x N
    design = np.concatenate([np.ones(diff.shape[:2] + (1,)), diff], axis=2)
    sw = np.sqrt(w)[:, :, None]
    coef = np.stack([np.linalg.lstsq(sw[i] * design[i], sw[i, :, 0] * y, rcond=None)[0]
                     for i in range(len(q))])
    return coef[:, 0], coef[:, 1:]


def rel_err(a, b):
    """max |a - b| / max(|b|, tiny), elementwise, over all entries."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), TINY)))


def slope_err(a, b):
    """max |a - b| / max |b| (b: the reference slopes)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b))) / max(float(np.max(np.abs(b))), TINY)


def python_locus(h):
    """A callable fitting and predicting with the Python package at degree 1, or (None, why)."""
    try:
        import locus
    except ImportError as e:
        return None, f"not importable ({e.__class__.__name__})"
    if not hasattr(locus, "KernelRegression"):
        return None, "no locus.KernelRegression"

    def make():
        return locus.KernelRegression(bandwidth=h, kernel="gaussian", degree=1, backend="cpu")

    try:
        make().fit(np.zeros((4, 1), np.float32), np.arange(4, dtype=np.float32)).predict(
            np.zeros((1, 1), np.float32))
    except Exception as e:  # noqa: BLE001 -- any refusal of degree=1 means: skip
        return None, f"degree=1 refused ({e.__class__.__name__}: {str(e).splitlines()[0][:80]})"
    return (lambda x, y: make().fit(x, y).predict(x)), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--locus", default=str(ROOT / "target" / "release" / "locus"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bandwidth", type=float, default=None,
                    help="one bandwidth for both cases (default: 0.02 for d = 1, 0.04 for d = 3)")
    ap.add_argument("--tol", type=float, default=1e-4, help="tolerance on the fitted values, relative")
    a = ap.parse_args()
    if not os.access(a.locus, os.X_OK):
        ap.error(f"no locus binary at {a.locus} (cargo build --release)")
    helptext = subprocess.run([a.locus, "local-mean", "--help"], capture_output=True, text=True).stdout
    if "--degree" not in helptext or "--slopes" not in helptext:
        ap.error(f"{a.locus} local-mean has no --degree/--slopes: rebuild it (cargo build --release)")
    if a.bandwidth is not None and not a.bandwidth > 0:
        ap.error("--bandwidth must be positive")

    from sklearn.datasets import load_diabetes
    from statsmodels.nonparametric.kernel_regression import KernelReg

    versions = [f"numpy {np.__version__}"]
    for mod in ("statsmodels", "sklearn", "scipy"):
        try:
            versions.append(f"{mod} {__import__(mod).__version__}")
        except ImportError:
            versions.append(f"{mod} not installed")
    locus_version = subprocess.run([a.locus, "--version"], capture_output=True, text=True).stdout.strip()
    print("## locus local linear regression vs statsmodels KernelReg(reg_type=\"ll\") (CPU)\n")
    print(f"- machine: {cpu_model()} ({platform.machine()}), {CORES} cores, {platform.system()} {platform.release()}")
    print(f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}")
    shown = os.path.relpath(a.locus, ROOT) if a.locus.startswith(str(ROOT)) else a.locus
    print(f"- {locus_version} ({shown}, --backend cpu); python {platform.python_version()}; {', '.join(versions)}")
    print(f"- command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print("- data: sklearn diabetes, N = M = 442 (queries = training points), gaussian kernel, one h in every"
          " dimension; locus in float32, statsmodels on the same values in float64")
    print(f"- best of {a.repeat}; locus wall = whole process incl. start and .npy I/O, (compute) = its own --json"
          f" seconds; statsmodels .fit and the Python package warm, in-process")

    data = load_diabetes()
    x_all = data.data.astype(np.float32)
    y32 = data.target.astype(np.float32)
    y64 = y32.astype(np.float64)
    rows, fails, notes = [], [], []
    with tempfile.TemporaryDirectory(prefix="locus-ll-") as tmp:
        np.save(f"{tmp}/y.npy", y32[:, None])
        for name, cols, h_default in CASES:
            h = a.bandwidth if a.bandwidth is not None else h_default
            d = len(cols)
            x32 = np.ascontiguousarray(x_all[:, list(cols)])
            x64 = x32.astype(np.float64)
            n = len(x32)

            # statsmodels, float64
            with warnings.catch_warnings():  # statsmodels 0.15 warns about its future default RNG (unused here)
                warnings.simplefilter("ignore", FutureWarning)
                sm = KernelReg(endog=y64, exog=x64, var_type="c" * d, reg_type="ll", bw=[h] * d)
            t_sm, (sm_mean, sm_mfx) = best(lambda: sm.fit(x64), a.repeat)
            # The script's reading of statsmodels' conventions (bw = h of exp(-r^2/2h^2), mfx = slopes)
            ref_mean, ref_slopes = local_linear_f64(x64, x64, y64, h)
            sm_ref_fit, sm_ref_slope = rel_err(sm_mean, ref_mean), slope_err(sm_mfx, ref_slopes)
            if sm_ref_fit > 1e-8:
                notes.append(f"{name}: statsmodels' fitted values differ from the float64 lstsq solve by"
                             f" {sm_ref_fit:.1e} relative: the script's reading of its bandwidth is off,"
                             " or local designs are (nearly) singular")
            if sm_ref_slope > 1e-6:
                bad = int(np.sum(np.abs(sm_mfx - ref_slopes).max(1) > 1e-6 * np.abs(ref_slopes).max()))
                notes.append(f"{name}: statsmodels' slopes differ from the float64 lstsq solve by {sm_ref_slope:.1e}"
                             f" of max abs slope in {bad} rows: nearly singular local designs (statsmodels"
                             " takes pinv of the unscaled normal matrix, rcond 1e-15, which truncates there);"
                             " see the slopes column's (vs f64) figure for locus")

            # locus CLI, float32
            np.save(f"{tmp}/x.npy", x32)
            t_l, c_l, rep = run_locus(a.locus, [
                "local-mean", "--keys", f"{tmp}/x.npy", "--queries", f"{tmp}/x.npy", "--values", f"{tmp}/y.npy",
                "--kernel", "gaussian", "--bandwidth", repr(h), "--degree", "1",
                "--slopes", f"{tmp}/s.npy", "--output", f"{tmp}/o.npy"], a.repeat)
            fitted, slopes = np.load(f"{tmp}/o.npy"), np.load(f"{tmp}/s.npy")
            if fitted.shape != (n, 1) or slopes.shape != (n, 1, d):
                sys.exit(f"locus wrote shapes {fitted.shape}, {slopes.shape}; expected {(n, 1)}, {(n, 1, d)}")
            e_fit = rel_err(fitted[:, 0], sm_mean)
            e_slope = slope_err(slopes[:, 0, :], sm_mfx)
            e_ref = rel_err(fitted[:, 0], ref_mean)
            e_slope_ref = slope_err(slopes[:, 0, :], ref_slopes)
            summ = rep.get("summary", {})
            for key in ("empty_rows", "rank_deficient_rows"):
                if summ.get(key):
                    notes.append(f"{name}: locus reports {key} = {summ[key]}")
            # As in compare_torch_faiss.py: beyond tolerance of the peer is a failure unless the
            # peer is the one off the float64 reference and locus is within tolerance of it.
            ok = e_fit <= a.tol or (sm_ref_fit > a.tol and e_ref <= a.tol)
            verdict = "ok" if e_fit <= a.tol else "ok (statsmodels off; locus ok vs f64)" if ok else "**FAIL**"
            if not ok:
                fails.append(f"{name} (d = {d}, h = {h}): locus CLI fitted values off by {e_fit:.1e} relative"
                             f" (vs the float64 numpy solve: {e_ref:.1e}); tolerance {a.tol:g}")

            # locus Python package, in-process (when it takes degree=1)
            fn, why = python_locus(h)
            if fn is None:
                py = "-"
                if why and not any(n_.startswith("Python package") for n_ in notes):
                    notes.append(f"Python package: {why}; not timed")
            else:
                t_p, pred = best(lambda: fn(x32, y32), a.repeat)
                pred = np.asarray(pred, np.float64).reshape(-1)
                e_py, e_py_ref = rel_err(pred, sm_mean), rel_err(pred, ref_mean)
                py = f"{t_p:.4f} ({t_sm / t_p:.1f}x; err {e_py:.1e})"
                if e_py > a.tol and not (sm_ref_fit > a.tol and e_py_ref <= a.tol):
                    verdict = "**FAIL**"
                    fails.append(f"{name}: Python package fitted values off by {e_py:.1e} relative")

            rows.append((name, f"{d}", f"{n}", f"{h:g}", f"{e_fit:.1e} ({e_ref:.1e})",
                         f"{e_slope:.1e} ({e_slope_ref:.1e})", f"{t_sm:.4f}",
                         f"{t_l:.4f} ({c_l:.5f})", f"{t_sm / t_l:.1f} ({t_sm / c_l:.0f})", py,
                         verdict))
            sys.stdout.flush()

    table("Gaussian local linear regression on sklearn diabetes: locus CLI (float32) vs statsmodels KernelReg "
          "(float64), queries = the training points",
          ["columns", "d", "N = M", "h", "fitted: max rel. err (vs f64)",
           "slopes: max abs err / max abs slope (vs f64)",
           "statsmodels .fit s", "locus s, wall (compute)", "statsmodels/locus, wall (compute)",
           "locus Python s (statsmodels/python; err)", f"fitted ≤ {a.tol:g}"], rows)
    if notes:
        print("\nNotes:\n\n" + "\n".join(f"- {s}" for s in notes))
    if fails:
        print(f"\n**FAIL: fitted values beyond {a.tol:g} relative:**\n\n" + "\n".join(f"- {f}" for f in fails))
        sys.exit(1)
    print(f"\n**PASS**: locus fitted values within {a.tol:g} relative of statsmodels in every case.")


if __name__ == "__main__":
    main()
