"""
MeanShift clustering
====================

:class:`locus.MeanShift` follows :class:`sklearn.cluster.MeanShift`'s rules
(flat kernel, bin seeding, the ranking and merging of modes, ``cluster_all``)
and gives its clusters; the seeds move on the GPU or on every CPU core.
"""

import time

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import MeanShift as SkMeanShift
from sklearn.datasets import make_blobs

import locus

X, _ = make_blobs(n_samples=4000, centers=6, cluster_std=0.7, random_state=3)
bandwidth = locus.estimate_bandwidth(X, quantile=0.1, n_samples=2000)
print(f"estimated bandwidth: {bandwidth:.3f}")

t = time.perf_counter()
ms = locus.MeanShift(bandwidth=bandwidth, bin_seeding=True).fit(X)
print(f"locus: {len(ms.cluster_centers_)} clusters in {time.perf_counter() - t:.2f} s")

t = time.perf_counter()
sk = SkMeanShift(bandwidth=bandwidth, bin_seeding=True).fit(X)
print(f"scikit-learn: {len(sk.cluster_centers_)} clusters in {time.perf_counter() - t:.2f} s")
print(f"largest distance between the two sets of centres: "
      f"{np.abs(ms.cluster_centers_ - sk.cluster_centers_).max():.1e}")
print(f"labels equal: {np.array_equal(ms.labels_, sk.labels_)}")

# %%
# The clusters and their centres.
fig, ax = plt.subplots(figsize=(6, 5))
ax.scatter(X[:, 0], X[:, 1], c=ms.labels_, s=2, cmap="tab10")
ax.scatter(*ms.cluster_centers_.T, c="k", marker="x", s=80, label="centres")
ax.set_title(f"MeanShift, bandwidth {bandwidth:.2f}")
ax.legend(loc="upper right")
fig.tight_layout()

# %%
# With a smaller bandwidth and ``cluster_all=False``, the points farther than
# one bandwidth from every centre stay unlabelled (−1), counted as
# scikit-learn counts them; ``predict`` labels new points by their nearest
# centre.
small = locus.MeanShift(bandwidth=0.8, bin_seeding=True, cluster_all=False).fit(X)
print(f"{len(small.cluster_centers_)} clusters, {np.sum(small.labels_ == -1)} orphans")
print(ms.predict(ms.cluster_centers_[:3] + 0.1))
