"""Sharded MeanShift through Dask against the single-process CLI, same
points, runs alternating.

    python benches/compare_distributed.py [--locus target/release/locus]
        [--n 10000000] [--workers 2] [--threads 1] [--repeat 3]
        [--kernel uniform] [--bandwidth 1] [--scaling]

Needs the Python package with its ``distributed`` extra (dask,
distributed) in the running interpreter, and the CLI binary. The points
are the blobs of ``examples/python/distributed_mean_shift.py`` (8 centres
uniform in [−10, 10]², σ = 0.8, d = 2), generated on the workers in blocks
of 250 000 rows and persisted before any clock starts; they are written
once to a temporary ``.npy`` for the CLI (``locus mean-shift --seeds
binned --backend cpu``, its own reported op time, ``RAYON_NUM_THREADS`` =
workers × threads, i.e. the same cores). Each repeat runs the CLI, then
``locus.distributed.mean_shift`` on the cluster; the report gives both
times and their ratio per pair, the rounds (or iterations) and the time
per iteration of the shifting phase, the bytes the workers fetched from
one another (Dask's transfer log) against the keys' size, each worker's
peak resident memory, and whether the labels equal the CLI's.

``--scaling`` also runs the same points on a one-worker cluster with the
same threads per worker, its runs alternating with the others (both
clusters alive throughout), and reports the per-iteration ratio of each
pair and of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "python"))

from distributed_mean_shift import blob_block  # noqa: E402
from report import cpu_isa, cpu_model  # noqa: E402


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _fetched(dask_worker) -> int:  # type: ignore[no-untyped-def]
    return int(sum(e["total"] for e in dask_worker.transfer_incoming_log))


class Cluster:
    """A ``LocalCluster`` of ``workers`` one-thread processes holding the
    bench's points (generated on the workers, persisted)."""

    def __init__(self, a, workers: int) -> None:  # type: ignore[no-untyped-def]
        import dask
        import dask.array as da
        from distributed import Client, LocalCluster, wait

        self.a = a
        self.cluster = LocalCluster(
            n_workers=workers, processes=True, threads_per_worker=1, dashboard_address=":0",
            env={"RAYON_NUM_THREADS": str(a.threads)}, memory_limit=0,
        )
        self.client = Client(self.cluster)
        rng = np.random.default_rng(0)
        centers = rng.uniform(-10, 10, size=(8, 2))
        sizes = [min(250_000, a.n - i) for i in range(0, a.n, 250_000)]
        self.X = da.concatenate([
            da.from_delayed(dask.delayed(blob_block)(s, 1 + i, centers, 0.8), shape=(s, 2), dtype=np.float32)
            for i, s in enumerate(sizes)
        ]).persist()
        t = time.perf_counter()
        wait(self.X)
        self.generated = time.perf_counter() - t

    def save(self, x_path: str) -> None:
        if not os.path.exists(x_path):
            np.save(x_path, self.X.compute())

    def run(self, x_path: str | None, cli_threads: int | None) -> dict:
        """One sharded run (after one CLI run on the same points when
        ``cli_threads`` is given)."""
        import locus.distributed as ld
        from locus.distributed import _regions

        a, client = self.a, self.client
        # The shifting phase: the rounds of the region path (or the row
        # path's iterations, from the progress calls).
        real = _regions.Regions.routed
        rounds: list[tuple[str, float, float]] = []

        def routed(self, *args, what, **kw):  # type: ignore[no-untyped-def]
            t0 = time.perf_counter()
            out = real(self, *args, what=what, **kw)
            rounds.append((what, t0, time.perf_counter()))
            return out

        row: dict = {"generated_s": self.generated}
        if cli_threads is not None:
            p = subprocess.run(
                [a.locus, "mean-shift", "--input", x_path, "--bandwidth", str(a.bandwidth), "--kernel", a.kernel,
                 "--seeds", "binned", "--backend", "cpu", "--labels", f"{x_path}.labels.npy", "--json", "-q"],
                capture_output=True, text=True, check=True,
                env={**os.environ, "RAYON_NUM_THREADS": str(cli_threads)},
            )
            row["cli_s"] = json.loads(p.stdout)["seconds"]
        log: list = []
        before = sum(client.run(_fetched).values())
        _regions.Regions.routed = routed
        try:
            t0 = time.perf_counter()
            r = ld.mean_shift(client, self.X, bandwidth=a.bandwidth, kernel=a.kernel, seeds="binned",
                              backend="cpu", progress=lambda it, q, m: log.append((it, q, m, time.perf_counter())))
            row["sharded_s"] = time.perf_counter() - t0
        finally:
            _regions.Regions.routed = real
        row["fetched_mb"] = (sum(client.run(_fetched).values()) - before) / 1e6
        shifts = [c for c in rounds if "round" in c[0]]
        if shifts:
            row["rounds"] = len(shifts)
            row["per_iteration_ms"] = (shifts[-1][2] - shifts[0][1]) / r.n_iter * 1e3
        elif len(log) > 1:
            row["rounds"] = len(log)
            row["per_iteration_ms"] = (log[-1][3] - log[0][3]) / (len(log) - 1) * 1e3
        row["iterations"], row["modes"] = r.n_iter, len(r.cluster_centers)
        row["seeds"] = log[0][1] if log else 0
        if cli_threads is not None:
            row["labels_differ"] = int(np.sum(np.load(f"{x_path}.labels.npy") != r.labels))
        return row

    def peak_rss_mb(self) -> list[int]:
        return sorted(round(v) for v in self.client.run(_peak_rss_mb).values())

    def close(self) -> None:
        self.client.close()
        self.cluster.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--locus", default=str(ROOT / "target" / "release" / "locus"))
    p.add_argument("--n", type=int, default=10_000_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="engine threads per worker")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--kernel", default="uniform")
    p.add_argument("--bandwidth", type=float, default=1.0)
    p.add_argument("--scaling", action="store_true", help="also one worker, per-iteration ratio")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        x_path = f"{tmp}/x.npy"
        main_c = Cluster(a, a.workers)
        main_c.save(x_path)
        # With --scaling, a one-worker cluster on the same points, its runs
        # alternating with the others (pairwise ratios, as for the CLI).
        one_c = Cluster(a, 1) if a.scaling else None
        rows, one = [], []
        for _ in range(a.repeat):
            rows.append(main_c.run(x_path, a.workers * a.threads))
            if one_c is not None:
                one.append(one_c.run(None, None))
        rows[-1]["peak_rss_mb"] = main_c.peak_rss_mb()
        main_c.close()
        if one_c is not None:
            one_c.close()
        print(f"## Sharded MeanShift vs the CLI ({cpu_model()}, {os.cpu_count()} cores, "
              f"{cpu_isa()}, {platform.system()} {platform.release()}, {time.strftime('%Y-%m-%d %H:%M')})\n")
        print(f"N = {a.n:,} 2-D points, h = {a.bandwidth}, kernel {a.kernel}, bin seeds; "
              f"{a.workers} workers × {a.threads} engine threads against the CLI with "
              f"{a.workers * a.threads} threads; points generated on the workers in "
              f"{rows[0]['generated_s']:.2f} s\n")
        print("| pair | CLI s (op) | sharded s | sharded/CLI | rounds | iterations | ms per iteration "
              "| MB between workers (keys MB) | labels differing |")
        print("|---|---|---|---|---|---|---|---|---|")
        for i, r in enumerate(rows):
            print(f"| {i + 1} | {r['cli_s']:.2f} | {r['sharded_s']:.2f} | {r['sharded_s'] / r['cli_s']:.2f} | "
                  f"{r.get('rounds', '-')} | {r['iterations']} | {r.get('per_iteration_ms', float('nan')):.1f} | "
                  f"{r['fetched_mb']:.1f} ({a.n * 8 / 1e6:.0f}) | {r['labels_differ']} |")
        print(f"\npeak resident memory per worker: {rows[-1]['peak_rss_mb']} MB")
        if one:
            t1 = [r["per_iteration_ms"] for r in one]
            t2 = [r["per_iteration_ms"] for r in rows]
            pairs = [x / y for x, y in zip(t1, t2)]
            print(f"\n1 worker: {', '.join(f'{v:.1f}' for v in t1)} ms per iteration; "
                  f"{a.workers} workers: {', '.join(f'{v:.1f}' for v in t2)} (runs alternating); "
                  f"ratios pairwise {', '.join(f'{v:.2f}' for v in pairs)}, "
                  f"of medians {np.median(t1) / np.median(t2):.2f}")


if __name__ == "__main__":
    main()
