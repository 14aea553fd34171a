#!/usr/bin/env python3
"""Combines the parts `scripts/gpu-check.sh` wrote into gpu-check.json and a
readable table, gpu-check.md (also saved as DATE-ADAPTER.md, the name it
takes in benches/results/).

    gpu_check_report.py OUT_DIR [--dry-run]

With --dry-run it also checks what was written: every part ran, every bench
family has GPU results with kernel times, and every checked GPU result is
within tolerance; any gap exits 1.
"""

import datetime
import glob
import json
import os
import re
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"error": f"{os.path.basename(path)}: {e}"}


def parts(out):
    res = {}
    for path in sorted(glob.glob(os.path.join(out, "part-*.status"))):
        name = os.path.basename(path)[len("part-"):-len(".status")]
        try:
            rc, secs = open(path).read().split()
            res[name] = {"exit": int(rc), "seconds": int(secs), "timed_out": int(rc) in (124, 137)}
        except (OSError, ValueError):
            res[name] = {"exit": None}
    return res


def fmt(v, spec=".4f"):
    return "-" if v is None else format(v, spec)


def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "-"


def table(report):
    bench = report["bench"]
    torch = {(r["op"], json.dumps(r["sizes"], sort_keys=True)): r for r in report["torch"].get("results", [])}
    adapter = report.get("adapter") or "no GPU"
    lines = [
        f"# GPU check, {report['date']}: {adapter}",
        "",
        f"- adapter: {adapter}; driver: {report.get('driver') or '-'}; dry run: {report['dry_run']}",
        f"- cpu: {report.get('cpu') or '-'}",
        f"- torch: {report['torch'].get('torch', '-')} on {report['torch'].get('device', report['torch'].get('unavailable', '-'))}",
        "- locus times: median of the timed calls after a warm-up; e2e = host data in, results back in host memory; "
        "kernel = GPU timestamp queries around the compute passes. torch: kernel = CUDA events on device data, e2e = host in and out.",
        "- speed-up columns are torch time / locus time (above 1: locus faster).",
        "",
        "| op | sizes | locus e2e s | locus kernel s | kernel pairs/s | cpu s | torch e2e s | torch kernel s | vs torch e2e | vs torch kernel | checked |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in bench:
        g, c = r.get("gpu", {}), r.get("cpu", {})
        t = torch.get((r["op"], json.dumps(r["sizes"], sort_keys=True)), {})
        chk = r.get("check", {})
        dev = chk.get("deviation") or {}
        checked = "-" if not chk.get("rows") else f"{chk['rows']} rows, max rel {dev.get('max_rel', float('nan')):.1e}" + ("" if dev.get("ok", True) else " EXCEEDED")
        sizes = " ".join(f"{k}={v}" for k, v in r["sizes"].items())
        lines.append(
            f"| {r['op']} | {sizes} | {fmt(g.get('seconds'))} | {fmt(g.get('kernel_seconds'))} | "
            f"{fmt(g.get('kernel_pairs_per_second'), '.3e')} | {fmt(c.get('seconds')) if 'seconds' in c else c.get('error', '-')} | "
            f"{fmt(t.get('e2e_seconds'))} | {fmt(t.get('kernel_seconds'))} | "
            f"{ratio(t.get('e2e_seconds'), g.get('seconds'))} | {ratio(t.get('kernel_seconds'), g.get('kernel_seconds'))} | {checked} |"
        )
    cold = report.get("cold_start") or {}
    if "error" in cold:
        lines += ["", f"Cold start: not measured ({cold['error']})"]
    else:
        c, w = cold.get("cold", {}), cold.get("warm", {})
        lines += [
            "",
            f"Cold start (engine open + {cold.get('first_calls')} first calls, tiny sizes): "
            f"cold {fmt(c.get('seconds'))} s (start overhead {fmt(c.get('start_overhead_seconds'))} s), "
            f"warm {fmt(w.get('seconds'))} s (start overhead {fmt(w.get('start_overhead_seconds'))} s), "
            f"cache file {cold.get('cache_file_bytes')} bytes.",
        ]
    failed = {k: v for k, v in report["parts"].items() if v.get("exit") != 0}
    if failed:
        lines += ["", "Parts that failed: " + ", ".join(f"{k} (exit {v.get('exit')}{', timed out' if v.get('timed_out') else ''})" for k, v in failed.items())]
    skipped = report["torch"].get("skipped", [])
    if skipped:
        lines += ["", "torch skipped: " + "; ".join(f"{s.get('op')}: {s.get('why')}" for s in skipped)]
    return "\n".join(lines) + "\n"


def check(report):
    problems = []
    for name, p in report["parts"].items():
        if p.get("exit") != 0:
            problems.append(f"part {name} exited {p.get('exit')}")
    families = {r.get("family") for r in report["bench"]}
    for fam in ["LocalMean", "SelfLocalMean", "KernelMatrix", "Kde", "Knn", "Attention", "MeanShift"]:
        if fam not in families:
            problems.append(f"no bench result for {fam}")
    for r in report["bench"]:
        g = r.get("gpu", {})
        if not g.get("seconds"):
            problems.append(f"{r['op']}: no GPU time ({g.get('error')})")
        if g.get("kernel_seconds") is None:
            problems.append(f"{r['op']}: no GPU kernel time")
        dev = (r.get("check") or {}).get("deviation")
        if dev is None or not dev.get("ok"):
            problems.append(f"{r['op']}: GPU result not checked or beyond tolerance: {r.get('check')}")
    if not report.get("adapter"):
        problems.append("no adapter in the report")
    cold = report.get("cold_start") or {}
    if "error" in cold or not (cold.get("cold") or {}).get("seconds") or not (cold.get("warm") or {}).get("seconds"):
        problems.append(f"cold start not measured: {cold}")
    t = report["torch"]
    if "error" in t:
        problems.append(t["error"])
    elif "unavailable" not in t and not t.get("results"):
        problems.append("torch ran but timed nothing")
    return problems


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    dry = "--dry-run" in sys.argv[2:]
    info = load(os.path.join(out, "info.json"))
    bench, bench_meta = [], {}
    for path in sorted(glob.glob(os.path.join(out, "bench-*.json"))):
        b = load(path)
        bench.extend(b.get("results", []))
        if b.get("gpu"):
            bench_meta = b
    gpu = bench_meta.get("gpu") or info.get("gpu") or {}
    adapter = (gpu.get("adapter") or {}).get("name")
    torch_path = os.path.join(out, "torch.json")
    cold_path = os.path.join(out, "cold-start.json")
    cold = (load(cold_path).get("cold_start") if os.path.exists(cold_path) else None) or {
        "error": "cold-start part did not run"
    }
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "dry_run": dry,
        "adapter": adapter,
        "driver": (gpu.get("adapter") or {}).get("driver"),
        "gpu": gpu,
        "cpu": (bench_meta.get("cpu") or info.get("cpu") or {}).get("device"),
        "info": info,
        "parts": parts(out),
        "bench": bench,
        "cold_start": cold,
        "torch": load(torch_path) if os.path.exists(torch_path) else {"unavailable": "torch part did not run"},
    }
    text = table(report)
    slug = re.sub(r"[^a-z0-9]+", "-", (adapter or "no-gpu").lower()).strip("-")
    report["results_name"] = f"{report['date']}-{slug}.md"
    with open(os.path.join(out, "gpu-check.json"), "w") as f:
        json.dump(report, f, indent=1)
    for name in ("gpu-check.md", report["results_name"]):
        with open(os.path.join(out, name), "w") as f:
            f.write(text)
    print(text)
    if dry:
        problems = check(report)
        if problems:
            print("gpu-check dry run: FAILED\n  " + "\n  ".join(problems), file=sys.stderr)
            return 1
        print("gpu-check dry run: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
