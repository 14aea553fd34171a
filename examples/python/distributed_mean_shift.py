"""Bin-seeded MeanShift on a Dask cluster with locus.distributed.

The points are generated on the workers (blobs in d dimensions, one block
per shard) and never gathered; each worker keeps its shard resident in a
locus key set, every iteration sends the moving seeds out and merges the
shards' row states back.

    pip install './python[distributed]'          # locus-engine with dask
    python examples/python/distributed_mean_shift.py                 # 10^6 points, 2 workers
    python examples/python/distributed_mean_shift.py --large         # 10^7 points
    python examples/python/distributed_mean_shift.py --workers 1 --threads 2
    python examples/python/distributed_mean_shift.py --scheduler tcp://host:8786
    python examples/python/distributed_mean_shift.py --check --n 200000  # against locus.mean_shift
    python examples/python/distributed_mean_shift.py --plot ms.png       # needs matplotlib

``--threads`` is the engine threads per worker (RAYON_NUM_THREADS of the
local workers; default: the machine's cores split among the workers), so
1 worker × 2 threads against 2 workers × 1 thread compares the same cores.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def blob_block(n: int, seed: int, centers: np.ndarray, std: float) -> np.ndarray:
    """``n`` points around ``centers`` (runs on a worker)."""
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(centers), n)
    return (centers[pick] + rng.normal(scale=std, size=(n, centers.shape[1]))).astype(np.float32)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=1_000_000, help="points (default 10^6)")
    p.add_argument("--large", action="store_true", help="10^7 points")
    p.add_argument("--d", type=int, default=2, help="dimension")
    p.add_argument("--centers", type=int, default=8)
    p.add_argument("--bandwidth", type=float, default=1.0)
    p.add_argument("--kernel", default="uniform")
    p.add_argument("--workers", type=int, default=2, help="local worker processes")
    p.add_argument("--threads", type=int, default=None, help="engine threads per local worker")
    p.add_argument("--shards", type=int, default=None, help="shards (default one per worker)")
    p.add_argument("--backend", default="auto", choices=["auto", "gpu", "cpu"])
    p.add_argument("--scheduler", default=None, help="address of a running Dask scheduler")
    p.add_argument("--check", action="store_true", help="also run locus.mean_shift on one process")
    p.add_argument("--plot", default=None, metavar="PNG", help="scatter plot (matplotlib, 2-D)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--block", type=int, default=250_000, help="rows generated per task")
    a = p.parse_args()
    n = 10_000_000 if a.large else a.n

    import dask
    import dask.array as da
    from distributed import Client, LocalCluster

    import locus
    import locus.distributed as ld

    t0 = time.perf_counter()
    if a.scheduler:
        client = Client(a.scheduler)
        cluster = None
    else:
        threads = a.threads or max(1, (os.cpu_count() or 1) // a.workers)
        cluster = LocalCluster(
            n_workers=a.workers,
            processes=True,
            threads_per_worker=1,
            dashboard_address=":0",
            env={"RAYON_NUM_THREADS": str(threads)},
        )
        client = Client(cluster)
    workers = len(client.nthreads())
    shards = a.shards or workers
    print(f"cluster: {workers} workers ({time.perf_counter() - t0:.1f} s to start)")

    rng = np.random.default_rng(a.seed)
    centers = rng.uniform(-10, 10, size=(a.centers, a.d))
    # Generated in fixed blocks (the same points whatever the cluster), then
    # cut into one row block per shard by locus.distributed.
    sizes = [min(a.block, n - i) for i in range(0, n, a.block)]
    X = da.concatenate(
        [
            da.from_delayed(
                dask.delayed(blob_block)(s, a.seed + 1 + i, centers, 0.8),
                shape=(s, a.d),
                dtype=np.float32,
            )
            for i, s in enumerate(sizes)
        ]
    )

    log = []

    def progress(it: int, queried: int, moving: int) -> None:
        log.append((it, queried, moving, time.perf_counter()))

    def between_workers() -> int:
        # Bytes the workers fetched from one another (Dask's transfer log).
        logs = client.run(lambda dask_worker: sum(e["total"] for e in dask_worker.transfer_incoming_log))
        return int(sum(logs.values()))

    moved0 = between_workers()
    t1 = time.perf_counter()
    r = ld.mean_shift(
        client, X, bandwidth=a.bandwidth, kernel=a.kernel, seeds="binned",
        backend=a.backend, shards=shards, progress=progress,
    )
    t2 = time.perf_counter()
    moved = between_workers() - moved0
    seeds = log[0][1] if log else 0
    by_region = a.kernel.lower() in ld._regions.COMPACT
    print(f"N = {n:,} points, d = {a.d}, {shards} shards, h = {a.bandwidth}, kernel {a.kernel}")
    print(f"{seeds} bin seeds, {r.n_iter} iterations (converged: {r.converged}), "
          f"{len(r.cluster_centers)} modes")
    print(f"mean_shift: {t2 - t1:.2f} s end to end (points generated on the workers, "
          f"sharding, seeding, iterations, labelling)")
    sent = sum(m for _, m, _, _ in log)
    if by_region:
        # Sharded by region: each round sends a seed (position, steps) to
        # its slab's worker only, and gets it back with its end.
        per_seed = a.d * 4 + 8
        print(f"{len(log)} rounds (seeds shifted on their slab's worker between them); "
              f"seeds {sent * per_seed / 1e3:.1f} kB out, {sent * (per_seed + 1) / 1e3:.1f} kB back")
    else:
        iter_s = (log[-1][3] - log[0][3]) / max(1, len(log) - 1) if len(log) > 1 else float("nan")
        # Seeds out to every worker, states back per shard, each iteration.
        back = sent * (4 + 8 + 8 * a.d) * shards
        print(f"{iter_s * 1e3:.1f} ms per iteration; seeds {sent * a.d * 4 * workers / 1e6:.2f} MB out, "
              f"states {back / 1e6:.2f} MB back over all iterations")
    what = "the points moved once to their slabs, merges" if by_region else "blocks, merges"
    print(f"between workers: {moved / 1e6:.1f} MB ({what}) vs keys {n * a.d * 4 / 1e6:.1f} MB resident")
    print("populations:", r.populations.tolist())

    if a.check:
        x = X.compute()
        t3 = time.perf_counter()
        s = locus.mean_shift(x, bandwidth=a.bandwidth, kernel=a.kernel, bin_seeding=True,
                             backend=a.backend)
        t4 = time.perf_counter()
        same = np.array_equal(s.labels, r.labels)
        err = np.abs(s.cluster_centers - r.cluster_centers).max() if same else float("nan")
        print(f"single process: {t4 - t3:.2f} s; same partition: {same}; "
              f"largest mode difference {err:.2e}")

    if a.plot:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("--plot needs matplotlib; skipped")
        else:
            sample = X[:: max(1, n // 50_000)].compute()
            fig, ax = plt.subplots(figsize=(6, 6))
            ax.scatter(sample[:, 0], sample[:, 1], s=1, alpha=0.3)
            ax.scatter(r.cluster_centers[:, 0], r.cluster_centers[:, 1], c="red", marker="x")
            ax.set_title(f"MeanShift of {n:,} points on {workers} workers")
            fig.savefig(a.plot, dpi=120)
            print("plot:", a.plot)

    client.close()
    if cluster is not None:
        cluster.close()


if __name__ == "__main__":
    main()
