"""
Attention as a kernel local mean
================================

Softmax attention ``softmax(scale·ΦΨᵀ)V`` is a Nadaraya–Watson local mean
with an exponential kernel on inner products. :func:`locus.kernel_softmax`
computes it in one pass (an online softmax: the M × N scores are never
stored), batched over heads and optionally causal; an
:class:`locus.AttentionSet` keeps the keys and values resident for a
decoding loop that uploads only its queries.
"""

import matplotlib.pyplot as plt
import numpy as np

import locus

rng = np.random.default_rng(0)
heads, n, d = 4, 256, 32
phi = rng.normal(size=(heads, n, d)).astype(np.float32)
psi = rng.normal(size=(heads, n, d)).astype(np.float32)
values = rng.normal(size=(heads, n, d)).astype(np.float32)


def reference(phi, psi, v, causal):
    s = phi @ np.swapaxes(psi, -1, -2) / np.sqrt(phi.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    return (w / w.sum(axis=-1, keepdims=True)) @ v


for causal in (False, True):
    out = locus.kernel_softmax(phi, psi, values, causal=causal)
    err = np.abs(out - reference(phi, psi, values, causal)).max()
    print(f"causal={causal}: output {out.shape}, largest difference from numpy {err:.1e}")

# %%
# Decoding: the keys and values stay on the backend; each step sends one
# query per head and gets its output. With ``causal=True`` query ``i`` of
# ``M`` sees the keys ``0 .. i + N − M``, so one query sees every key.
memory = locus.Engine("auto").prepare_attention(psi, values)
print(f"attention set: {memory.batches} heads × {memory.n_keys} keys, "
      f"{memory.resident_bytes / 1024:.0f} KiB resident")
steps = [memory.attend(phi[:, t : t + 1, :]) for t in range(8)]
print("one step:", steps[0].shape)
full = locus.kernel_softmax(phi[:, :8], psi, values)
print("equal to the one-shot call:", np.allclose(np.concatenate(steps, axis=1), full, atol=1e-5))

# %%
# The weights themselves are a softmax over keys: the local mean of the
# identity matrix's rows gives them (for one head, a few queries).
w = locus.kernel_softmax(phi[0, :32], psi[0, :64], np.eye(64, dtype=np.float32))
fig, ax = plt.subplots(figsize=(7, 3.5))
im = ax.imshow(w, aspect="auto", cmap="viridis")
ax.set_xlabel("key")
ax.set_ylabel("query")
ax.set_title("softmax weights of head 0")
fig.colorbar(im, ax=ax)
fig.tight_layout()

# %%
# Linear attention (:func:`locus.feature_local_mean`) replaces the
# exponential by non-negative features, computed in time linear in N.
features = lambda x: np.maximum(x, 0) + 1e-3  # noqa: E731
lin = locus.feature_local_mean(features(phi), features(psi), values, causal=True)
print("linear attention:", lin.shape, "finite:", bool(np.isfinite(lin).all()))
