"""
Serving small batches from a prepared KeySet
============================================

A function such as :func:`locus.local_mean` lays out its keys on every call.
When the same keys answer many small requests — a model behind an endpoint —
:meth:`locus.Engine.prepare` keeps them resident on the backend as a
:class:`locus.KeySet`, and each request pays only for its own queries. A key
set is thread-safe and releases the GIL: threads share it, and concurrent
small requests are coalesced into one engine call.
"""

import time
from concurrent.futures import ThreadPoolExecutor

import matplotlib.pyplot as plt
import numpy as np

import locus

rng = np.random.default_rng(0)
keys = rng.normal(size=(100_000, 8)).astype(np.float32)
values = np.sin(keys[:, 0]) + 0.1 * rng.normal(size=len(keys)).astype(np.float32)
labels = keys[:, 1] > 0
queries = rng.normal(size=(200, 8)).astype(np.float32)

engine = locus.Engine("auto")
ks = engine.prepare(keys, values=values, labels=labels)
print(f"{ks.n_keys} keys of dimension {ks.dim} prepared on {engine.backend}: "
      f"{ks.resident_bytes / 2**20:.1f} MiB resident")

# %%
# One query at a time: the one-shot function against the prepared key set.
def per_call(fn, n=50) -> float:
    t = time.perf_counter()
    for q in queries[:n]:
        fn(q[None, :])
    return (time.perf_counter() - t) / n


one_shot = per_call(lambda q: locus.local_mean(q, keys, values, bandwidth=0.8, backend=engine))
prepared = per_call(lambda q: ks.local_mean(q, bandwidth=0.8))
print(f"one query: one-shot {one_shot * 1e3:.2f} ms, KeySet {prepared * 1e3:.2f} ms")
assert np.allclose(
    ks.local_mean(queries, bandwidth=0.8),
    locus.local_mean(queries, keys, values, bandwidth=0.8, backend=engine),
    rtol=1e-4, atol=1e-5,
)

# %%
# Many threads, each with small requests, sharing the key set; ``stats``
# tells how the requests were served (alone, or coalesced into batches).
with ThreadPoolExecutor(8) as pool:
    t = time.perf_counter()
    answers = list(pool.map(lambda q: ks.predict_proba(q[None, :], bandwidth=0.8), queries))
    elapsed = time.perf_counter() - t
print(f"{len(answers)} requests from 8 threads in {elapsed * 1e3:.0f} ms; classes {ks.classes}")
print(ks.stats())

# %%
# The key set answers every op over its keys with any kernel and bandwidth:
# densities at a few bandwidths, and the nearest keys.
fig, ax = plt.subplots(figsize=(6, 3.5))
line = np.zeros((200, 8), dtype=np.float32)
line[:, 0] = np.linspace(-4, 4, 200)
for h in (0.5, 0.8, 1.2):
    ax.plot(line[:, 0], ks.local_mean(line, bandwidth=h), label=f"bandwidth {h}")
ax.plot(line[:, 0], np.sin(line[:, 0]), "k:", label="sin(x₀)")
ax.set_xlabel("x₀ (other coordinates 0)")
ax.set_ylabel("local mean")
ax.legend()
fig.tight_layout()

dist, idx = ks.knn(queries[:2], 3)
print(dist.round(3), idx, sep="\n")
