"""
Kernel density estimation against scikit-learn's
================================================

:class:`locus.KernelDensity` takes :class:`sklearn.neighbors.KernelDensity`'s
arguments and gives its log-densities: exact sums over every point (no tree)
in float32 on points centred on their mean, returned in float64. Here both
fit the same bimodal sample; the curves coincide and the largest difference
is float32 rounding.
"""

import time

import matplotlib.pyplot as plt
import numpy as np
from sklearn.neighbors import KernelDensity as SkKernelDensity

import locus

rng = np.random.default_rng(0)
X = np.concatenate([rng.normal(-2.0, 0.5, 3000), rng.normal(1.5, 1.0, 7000)])[:, None]
grid = np.linspace(-5, 6, 500)[:, None]

# %%
# The same arguments for both: scikit-learn's names, scikit-learn's defaults.
params = dict(bandwidth="silverman", kernel="epanechnikov", algorithm="auto", rtol=1e-8)

t = time.perf_counter()
ours = locus.KernelDensity(**params).fit(X)
log_p = ours.score_samples(grid)
t_ours = time.perf_counter() - t

t = time.perf_counter()
theirs = SkKernelDensity(**params).fit(X)
log_p_sk = theirs.score_samples(grid)
t_sk = time.perf_counter() - t

inside = np.isfinite(log_p_sk)
print(f"bandwidth: locus {ours.bandwidth_:.4f}, scikit-learn {theirs.bandwidth_:.4f}")
print(f"dtype: {log_p.dtype}; -inf at the same points: "
      f"{np.array_equal(np.isfinite(log_p), inside)}")
print(f"largest |difference| of the densities: "
      f"{np.max(np.abs(np.exp(log_p) - np.exp(log_p_sk))):.2e}")
print(f"time: locus {t_ours * 1e3:.1f} ms, scikit-learn {t_sk * 1e3:.1f} ms "
      f"({locus.Engine().info()['backend']} backend)")

# %%
# Both curves, and a histogram of the sample.
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.hist(X[:, 0], bins=80, density=True, color="0.85", label="sample")
ax.plot(grid[:, 0], np.exp(log_p_sk), lw=4, alpha=0.5, label="scikit-learn")
ax.plot(grid[:, 0], np.exp(log_p), "k--", lw=1.2, label="locus")
ax.set_xlabel("x")
ax.set_ylabel("density")
ax.legend()
fig.tight_layout()

# %%
# Sampling draws new points from the fitted density, as scikit-learn's
# ``sample`` does (gaussian kernel here).
gauss = locus.KernelDensity(bandwidth=0.3).fit(X)
new = gauss.sample(5, random_state=0)
print(new.round(3).ravel())
