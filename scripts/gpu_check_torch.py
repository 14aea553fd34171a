#!/usr/bin/env python3
"""The shapes `locus bench` ran, through PyTorch on the same GPU.

Reads the bench-*.json files `scripts/gpu-check.sh` wrote and, for each
case PyTorch has an obvious counterpart for, times it:

- local mean (Nadaraya-Watson): chunked ``softmax(-cdist(q, x)^2 / 2h^2) @ y``;
- attention: ``torch.nn.functional.scaled_dot_product_attention`` in fp32
  (for new queries against prepared keys, the keys kept on the device);
- kNN: chunked ``cdist`` + ``topk``;
- kernel matrix: ``exp(-cdist^2 / 2h^2)`` (row-normalized when asked).

Two times per case, each the median of three calls after a warm-up: the
kernel time (CUDA events, inputs already on the device, result left there)
and the end-to-end time (float32 inputs from host memory, result copied back,
as locus's end-to-end time is). Data are uniform like the bench's, not the
same numbers: this is a timing, not a comparison of results.

Without torch, or without CUDA (unless --allow-cpu, for the dry run), it
writes why into the output and exits 0: a missing peer is a result too.
"""

import argparse
import glob
import json
import os
import statistics
import sys
import time


def load_cases(bench_dir):
    cases = []
    for path in sorted(glob.glob(os.path.join(bench_dir, "bench-*.json"))):
        try:
            with open(path) as f:
                cases.extend(json.load(f).get("results", []))
        except (OSError, ValueError) as e:
            print(f"torch: skipping {path}: {e}", file=sys.stderr)
    return cases


class Timer:
    def __init__(self, torch, device):
        self.torch = torch
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def kernel(self, fn, calls=3):
        """Median seconds of `fn` on device data (CUDA events on a GPU)."""
        fn()
        self.sync()
        times = []
        for _ in range(calls):
            if self.cuda:
                start = self.torch.cuda.Event(enable_timing=True)
                end = self.torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            else:
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
        return statistics.median(times)

    def end_to_end(self, fn, calls=3):
        """Median wall seconds of `fn`, which moves host data in and out."""
        fn()
        self.sync()
        times = []
        for _ in range(calls):
            t = time.perf_counter()
            fn()
            self.sync()
            times.append(time.perf_counter() - t)
        return statistics.median(times)


def chunk_rows(n, cap=1 << 28):
    """Query rows per chunk so that one chunk's distance block stays under `cap` floats."""
    return max(1, cap // max(n, 1))


def run_case(torch, timer, device, case):
    F = torch.nn.functional
    family = case.get("family")
    sizes = case["sizes"]
    params = case.get("params", {})
    gen = torch.Generator(device="cpu").manual_seed(0)

    def host(*shape, lo=0.0, hi=1.0):
        return (torch.rand(*shape, generator=gen) * (hi - lo) + lo).numpy()

    def dev(a):
        return torch.from_numpy(a).to(device)

    if family == "LocalMean":
        m, n, d, q = sizes["M"], sizes["N"], sizes["d"], sizes["q"]
        h = float(params["bandwidth"])
        qh, xh, yh = host(m, d), host(n, d), host(n, q)
        step = chunk_rows(n)

        def nw(qd, xd, yd):
            out = torch.empty(m, q, device=device)
            for r in range(0, m, step):
                d2 = torch.cdist(qd[r:r + step], xd).square_()
                out[r:r + step] = torch.softmax(d2.mul_(-0.5 / (h * h)), dim=1) @ yd
            return out

        qd, xd, yd = dev(qh), dev(xh), dev(yh)
        kernel = timer.kernel(lambda: nw(qd, xd, yd))
        e2e = timer.end_to_end(lambda: nw(dev(qh), dev(xh), dev(yh)).cpu().numpy())
        what = "chunked softmax(-cdist^2/2h^2) @ Y"
    elif family == "Attention":
        b, t, d = sizes["B"], sizes["T"], sizes["d"]
        m = sizes.get("M", t)  # new queries against T keys (decoding), or T
        causal = bool(params.get("causal"))
        prepared = bool(params.get("prepared"))
        ph = host(1, b, m, d, lo=-1.0, hi=1.0)
        sh, vh = (host(1, b, t, d, lo=-1.0, hi=1.0) for _ in range(2))

        def sdpa(p, s, v):
            return F.scaled_dot_product_attention(p, s, v, is_causal=causal)

        pd, sd, vd = dev(ph), dev(sh), dev(vh)
        kernel = timer.kernel(lambda: sdpa(pd, sd, vd))
        if prepared:
            # Keys and values stay on the device, as locus's prepared set keeps them.
            e2e = timer.end_to_end(lambda: sdpa(dev(ph), sd, vd).cpu().numpy())
        else:
            e2e = timer.end_to_end(lambda: sdpa(dev(ph), dev(sh), dev(vh)).cpu().numpy())
        what = "scaled_dot_product_attention fp32" + (" causal" if causal else "")
        what += " (keys on the device)" if prepared else ""
    elif family == "Knn":
        m, n, d, k = sizes["M"], sizes["N"], sizes["d"], sizes["k"]
        qh, xh = host(m, d), host(n, d)
        step = chunk_rows(n)

        def knn(qd, xd):
            dist = torch.empty(m, k, device=device)
            idx = torch.empty(m, k, dtype=torch.long, device=device)
            for r in range(0, m, step):
                v, i = torch.topk(torch.cdist(qd[r:r + step], xd), k, dim=1, largest=False)
                dist[r:r + step], idx[r:r + step] = v, i
            return dist, idx

        qd, xd = dev(qh), dev(xh)
        kernel = timer.kernel(lambda: knn(qd, xd))
        e2e = timer.end_to_end(lambda: [a.cpu().numpy() for a in knn(dev(qh), dev(xh))])
        what = "chunked cdist + topk"
    elif family == "KernelMatrix" and "M" in sizes:
        m, n, d = sizes["M"], sizes["N"], sizes["d"]
        h = float(params["bandwidth"])
        rows = params.get("normalize") == "rows"
        qh, xh = host(m, d), host(n, d)

        def km(qd, xd):
            k = torch.cdist(qd, xd).square_().mul_(-0.5 / (h * h)).exp_()
            return k / k.sum(dim=1, keepdim=True) if rows else k

        qd, xd = dev(qh), dev(xh)
        kernel = timer.kernel(lambda: km(qd, xd))
        e2e = timer.end_to_end(lambda: km(dev(qh), dev(xh)).cpu().numpy())
        what = "exp(-cdist^2/2h^2)" + (" / row sums" if rows else "")
    else:
        return None
    pairs = case.get("pairs")
    return {
        "op": case["op"],
        "family": family,
        "sizes": sizes,
        "torch_op": what,
        "kernel_seconds": kernel,
        "e2e_seconds": e2e,
        "kernel_pairs_per_second": pairs / kernel if pairs and kernel > 0 else None,
        "e2e_pairs_per_second": pairs / e2e if pairs and e2e > 0 else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--allow-cpu", action="store_true", help="run on the CPU when there is no CUDA device (dry run)")
    a = ap.parse_args()
    report = {"results": [], "skipped": []}

    def write():
        tmp = a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(report, f, indent=1)
        os.replace(tmp, a.out)

    try:
        import torch
    except ImportError as e:
        report["unavailable"] = f"torch cannot be imported: {e}"
        write()
        print(f"torch: {report['unavailable']}")
        return 0
    report["torch"] = torch.__version__
    if torch.cuda.is_available():
        device = torch.device("cuda")
        report["device"] = torch.cuda.get_device_name(0)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    elif a.allow_cpu:
        device = torch.device("cpu")
        report["device"] = "cpu"
    else:
        report["unavailable"] = "torch sees no CUDA device"
        write()
        print(f"torch: {report['unavailable']}")
        return 0
    report["timing"] = "median of 3 after a warm-up; kernel: CUDA events on device data; e2e: host float32 in and out"
    timer = Timer(torch, device)
    for case in load_cases(a.bench_dir):
        try:
            r = run_case(torch, timer, device, case)
        except Exception as e:  # one failed case (e.g. out of memory) must not lose the others
            report["skipped"].append({"op": case.get("op"), "sizes": case.get("sizes"), "why": f"{type(e).__name__}: {e}"})
            if device.type == "cuda":
                torch.cuda.empty_cache()
            continue
        if r is None:
            report["skipped"].append({"op": case.get("op"), "sizes": case.get("sizes"), "why": "no PyTorch counterpart timed"})
            continue
        report["results"].append(r)
        print(f"torch: {r['op']} {r['sizes']}: kernel {r['kernel_seconds']:.4g} s, e2e {r['e2e_seconds']:.4g} s")
        write()
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
