#!/usr/bin/env python3
"""`locus serve` under load from `wrk`, against its own single-call peak.

Starts the release binary with one set of N = 10⁵ uniform keys in d = 8
(values: the first coordinate), then, for each connection count, drives
`POST /v1/sets/bench/local-mean` with 16-query JSON requests (gaussian,
h = 0.3) from `wrk` for a fixed time, and reads requests/s, p50 and p99
from `wrk --latency`. Beside it, in the same run and the same process, the
single-call peak: one request of 4096 queries (best of 3), whose key-query
pairs per second are what the engine does with one large call. The table
gives each load's pairs/s as a fraction of that peak and p99/p50.

    cargo build --release --bin locus
    python3 benches/serve_wrk.py [--duration 15] [--connections 16,256]
        [--threads 2] [--no-batching] [--bin target/release/locus]

Needs `wrk` on PATH (Debian: apt-get install wrk); only the standard
library of Python. Prints a Markdown table and the CPU it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

N, D, ROWS, BANDWIDTH, PEAK_ROWS = 100_000, 8, 16, 0.3, 4096


def write_npy(path: str, rows: int, cols: int, values) -> None:
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, cols)
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%df" % (rows * cols), *values))


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def post(url: str, body: bytes) -> bytes:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return r.read()


def parse_wrk(text: str) -> dict:
    def ms(v: str, unit: str) -> float:
        return float(v) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]

    lat = {p: ms(v, u) for p, v, u in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s|m)\b", text, re.M)}
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    errors = re.search(r"Socket errors:.*", text)
    return {
        "rps": rps,
        "p50": lat["50"],
        "p99": lat["99"],
        "non2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": errors.group(0) if errors else "",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="target/release/locus")
    ap.add_argument("--duration", type=int, default=15)
    ap.add_argument("--connections", default="16,256")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-batching", action="store_true")
    a = ap.parse_args()
    if not shutil.which("wrk"):
        print("wrk not found on PATH (apt-get install wrk)", file=sys.stderr)
        return 2
    rng = random.Random(7)
    tmp = tempfile.mkdtemp(prefix="locus-wrk-")
    keys = [rng.random() for _ in range(N * D)]
    write_npy(f"{tmp}/keys.npy", N, D, keys)
    write_npy(f"{tmp}/values.npy", N, 1, keys[::D])
    cmd = [a.bin, "serve", "--port", "0", "--quiet", "--threads", str(a.threads),
           "--queue-depth", "1024", "--max-in-flight", "1024", "--max-connections", "1024",
           "--set", "bench", "--keys", f"{tmp}/keys.npy", "--values", f"{tmp}/values.npy"]
    if a.no_batching:
        cmd.append("--no-batching")
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        m = re.match(r"listening on (http://\S+)", line)
        if not m:
            print(f"unexpected first line: {line!r}", file=sys.stderr)
            return 1
        base = m.group(1)
        url = f"{base}/v1/sets/bench/local-mean"

        def body(rows: int) -> bytes:
            qs = [[round(rng.random(), 6) for _ in range(D)] for _ in range(rows)]
            return json.dumps({"queries": qs, "kernel": "gaussian", "bandwidth": BANDWIDTH}).encode()

        big = body(PEAK_ROWS)
        post(url, big)  # warm
        best = min(_timed(lambda: post(url, big)) for _ in range(3))
        peak = PEAK_ROWS * N / best
        small = body(ROWS).decode()
        lua = f"{tmp}/post.lua"
        with open(lua, "w") as f:
            f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n')
            f.write("wrk.body = %s\n" % json.dumps(small))
        load = os.getloadavg()[0]
        print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; server threads {a.threads}; "
              f"batching {'off' if a.no_batching else 'on'}; load average before: {load:.2f}")
        print(f"single-call peak: {PEAK_ROWS} queries x {N} keys in {best * 1e3:.1f} ms "
              f"= {peak / 1e9:.3f}e9 pairs/s\n")
        print("| connections | requests/s | p50 (ms) | p99 (ms) | p99/p50 | pairs/s (1e9) | of peak | non-2xx |")
        print("|---|---|---|---|---|---|---|---|")
        for c in [int(x) for x in a.connections.split(",")]:
            out = subprocess.run(
                ["wrk", "-t", str(min(c, 2)), "-c", str(c), "-d", f"{a.duration}s", "--latency",
                 "--timeout", "30s", "-s", lua, url],
                capture_output=True, text=True, check=True).stdout
            r = parse_wrk(out)
            pairs = r["rps"] * ROWS * N
            print(f"| {c} | {r['rps']:.0f} | {r['p50']:.1f} | {r['p99']:.1f} | "
                  f"{r['p99'] / r['p50']:.2f} | {pairs / 1e9:.3f} | {pairs / peak:.0%} | {r['non2xx']} |")
            if r["socket_errors"]:
                print(f"  ({r['socket_errors']})")
    finally:
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


if __name__ == "__main__":
    sys.exit(main())
