"""Image segmentation by MeanShift: locus (joint spatial-range product
kernel, and the flat kernel on scaled features) against scikit-learn's
MeanShift on scikit-learn's china.jpg.

    python benches/compare_segmentation.py [--scale 4] [--spatial 6] [--range 8]
        [--repeat 3] [--backend cpu] [--out DIR]

Needs numpy, scikit-learn and Pillow (scikit-learn's load_sample_image reads
the JPEG with it), and the locus Python package (``maturin develop`` in
python/); the crate itself does not depend on Python.

Data: ``load_sample_image("china.jpg")`` (427 x 640, sRGB), averaged over
``--scale`` x ``--scale`` squares (default 4: 107 x 160 = 17,120 pixels),
converted to CIE L*u*v* (D65; the same formulas as examples/segment.rs).
Each pixel is the point (row, col, L*, u*, v*).

Methods:
- scikit-learn ``MeanShift(bandwidth=1, bin_seeding=True)`` on the features
  (row/hs, col/hs, L/hr, u/hr, v/hr): the usual recipe, a flat ball in the
  scaled joint space (hs = ``--spatial`` pixels, hr = ``--range``).
- locus ``mean_shift(features, bandwidth=1, kernel="uniform",
  bin_seeding=True)``: the same algorithm and parameters (its labels are
  compared with scikit-learn's: adjusted Rand index).
- locus joint MeanShift, ``kernel=ProductKernel([(2, "uniform", hs),
  (3, "gaussian", hr)])``, every pixel a seed (Comaniciu-Meer): the
  product kernel this project adds; not the same kernel as the flat ball,
  so its segments are reported, not compared.

Each segmentation paints every pixel with its mode's colour; reported:
segments, the largest segment's share, PSNR of the painted image against
the (scaled) photograph, and the time of the clustering call (best of
``--repeat`` after one untimed call; scikit-learn with n_jobs=None, its
default). With ``--out`` the painted images and a side-by-side PNG are
written there. A Markdown report goes to stdout.
"""

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import cpu_model, table  # noqa: E402

WHITE = np.array([0.95047, 1.0, 1.08883])


def white_uv():
    x, y, z = WHITE
    den = x + 15 * y + 3 * z
    return 4 * x / den, 9 * y / den


def rgb_to_luv(img):
    c = img.astype(np.float64) / 255.0
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    m = np.array(
        [
            [0.4124564, 0.3575761, 0.1804375],
            [0.2126729, 0.7151522, 0.0721750],
            [0.0193339, 0.1191920, 0.9503041],
        ]
    )
    xyz = lin @ m.T
    x, y, z = xyz[..., 0], xyz[..., 1], xyz[..., 2]
    yr = y / WHITE[1]
    l = np.where(yr > (6 / 29) ** 3, 116 * np.cbrt(yr) - 16, (29 / 3) ** 3 * yr)
    den = x + 15 * y + 3 * z
    un, vn = white_uv()
    with np.errstate(invalid="ignore", divide="ignore"):
        up = np.where(den > 0, 4 * x / den, un)
        vp = np.where(den > 0, 9 * y / den, vn)
    return np.stack([l, 13 * l * (up - un), 13 * l * (vp - vn)], -1)


def luv_to_rgb(luv):
    l, u, v = luv[..., 0], luv[..., 1], luv[..., 2]
    un, vn = white_uv()
    ls = np.maximum(l, 1e-9)
    up, vp = u / (13 * ls) + un, v / (13 * ls) + vn
    y = np.where(l > 8, ((l + 16) / 116) ** 3, l * (3 / 29) ** 3) * WHITE[1]
    x = y * 9 * up / (4 * vp)
    z = y * (12 - 3 * up - 20 * vp) / (4 * vp)
    m = np.array(
        [
            [3.2404542, -1.5371385, -0.4985314],
            [-0.9692660, 1.8760108, 0.0415560],
            [0.0556434, -0.2040259, 1.0572252],
        ]
    )
    lin = np.clip(np.stack([x, y, z], -1) @ m.T, 0, 1)
    s = np.where(lin <= 0.0031308, 12.92 * lin, 1.055 * lin ** (1 / 2.4) - 0.055)
    out = np.round(s * 255).astype(np.uint8)
    out[l <= 0] = 0
    return out


def downscale(img, s):
    if s == 1:
        return img
    h, w = img.shape[0] // s * s, img.shape[1] // s * s
    return img[:h, :w].reshape(h // s, s, w // s, s, 3).mean((1, 3)).round().astype(np.uint8)


def paint(labels, modes_luv, shape):
    return luv_to_rgb(modes_luv[labels].reshape(shape[0], shape[1], 3))


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 10 * np.log10(255.0**2 / max(mse, 1e-12))


def best_of(fn, repeat):
    fn()
    times = []
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=int, default=4)
    ap.add_argument("--spatial", type=float, default=6.0)
    ap.add_argument("--range", type=float, default=8.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()

    import sklearn
    from sklearn.cluster import MeanShift
    from sklearn.datasets import load_sample_image
    from sklearn.metrics import adjusted_rand_score

    import locus

    img = downscale(load_sample_image("china.jpg"), a.scale)
    hgt, wid = img.shape[:2]
    luv = rgb_to_luv(img).reshape(-1, 3)
    rows, cols = np.divmod(np.arange(hgt * wid), wid)
    x = np.column_stack([rows, cols, luv]).astype(np.float32)
    scale = np.array([a.spatial] * 2 + [a.range] * 3, dtype=np.float32)
    feats = x / scale
    n = len(x)

    results = []
    images = {}

    t, sk = best_of(lambda: MeanShift(bandwidth=1.0, bin_seeding=True).fit(feats), a.repeat)
    sk_modes = sk.cluster_centers_ * scale
    images["scikit-learn flat"] = paint(sk.labels_, sk_modes[:, 2:], img.shape)
    results.append(("scikit-learn MeanShift", "flat ball, bandwidth=1 on scaled features, bin_seeding", t, sk.labels_, len(sk_modes), images["scikit-learn flat"], None))

    t, lf = best_of(
        lambda: locus.mean_shift(feats, bandwidth=1.0, kernel="uniform", bin_seeding=True, backend=a.backend),
        a.repeat,
    )
    images["locus flat"] = paint(lf.labels, lf.cluster_centers[:, 2:] * scale[2:], img.shape)
    ari = adjusted_rand_score(sk.labels_, lf.labels)
    results.append(("locus mean_shift", "the same: uniform, bandwidth=1, bin_seeding", t, lf.labels, len(lf.cluster_centers), images["locus flat"], ari))

    k = locus.ProductKernel([(2, "uniform", a.spatial), (3, "gaussian", a.range)])
    t, lj = best_of(lambda: locus.mean_shift(x, kernel=k, backend=a.backend), a.repeat)
    images["locus joint"] = paint(lj.labels, lj.cluster_centers[:, 2:], img.shape)
    results.append(("locus joint MeanShift", f"ProductKernel(2 x uniform h={a.spatial:g}, 3 x gaussian h={a.range:g}), every pixel a seed", t, lj.labels, len(lj.cluster_centers), images["locus joint"], None))

    sk_time = results[0][2]
    print(f"# Image segmentation by MeanShift on china.jpg, {datetime.date.today()}\n")
    print(f"- machine: {cpu_model()} ({platform.machine()}), {os.cpu_count()} cores, {platform.system()} {platform.release()}")
    print(f"- python {platform.python_version()}; numpy {np.__version__}; scikit-learn {sklearn.__version__}; locus {locus.__version__}, backend {a.backend!r}")
    print(f"- command: python benches/compare_segmentation.py --scale {a.scale} --spatial {a.spatial:g} --range {a.range:g} --repeat {a.repeat} --backend {a.backend}")
    print(f"- data: load_sample_image('china.jpg') 427 x 640, {a.scale}x{a.scale} averaged: {hgt} x {wid} = {n} pixels as (row, col, L*, u*, v*)")
    print(f"- times: the clustering call, best of {a.repeat} after one untimed call; ratio = scikit-learn time / method time")
    rows_out = []
    for name, params, t, labels, segs, painted, ari in results:
        largest = np.bincount(labels).max() / n
        rows_out.append([
            name, params, str(segs), f"{largest:.1%}", f"{psnr(painted, img):.2f}", f"{t:.3f}",
            f"{sk_time / t:.1f}", "-" if ari is None else f"{ari:.4f}",
        ])
    table(
        f"Segmentation of china.jpg ({hgt} x {wid}), spatial h = {a.spatial:g} px, range h = {a.range:g} L*u*v*",
        ["method", "kernel and seeds", "segments", "largest", "PSNR dB", "seconds", "scikit-learn / method", "ARI vs scikit-learn"],
        rows_out,
    )
    if a.out:
        from PIL import Image

        a.out.mkdir(parents=True, exist_ok=True)
        for key, im in images.items():
            Image.fromarray(im).save(a.out / f"{key.replace(' ', '-')}.png")
        side = np.concatenate([img, np.full((hgt, 4, 3), 255, np.uint8), images["locus joint"],
                               np.full((hgt, 4, 3), 255, np.uint8), images["scikit-learn flat"]], 1)
        Image.fromarray(side).save(a.out / "side-by-side.png", optimize=True)
        print(f"\nImages: {a.out}/ (side-by-side.png: photograph | locus joint | scikit-learn flat)")


if __name__ == "__main__":
    main()
