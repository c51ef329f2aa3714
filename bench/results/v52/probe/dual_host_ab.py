#!/usr/bin/env python3
"""Host cost and GPU time of GPU MODE's dual-GEMM drop-in (fp4gemm.gpumode.dual_gemm_custom_kernel), whichever
package PYTHONPATH gives: per shape, the median host time of one call (no synchronisation; 2000 calls
after warm-up, the stream drained every 100) and the event time of one call (L2 flushed, median of 50),
plus a digest of the output (A/B packages must agree)."""
import hashlib, statistics, sys, time
import torch
from fp4gemm import gpumode
tag = sys.argv[1]
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
for m, n, k, l in [(256, 4096, 7168, 1), (512, 3072, 7168, 1), (64, 256, 512, 3)]:
    data = gpumode.dual_generate_input(m, n, k, l=l, seed=1)
    for _ in range(20): gpumode.dual_gemm_custom_kernel(data)
    torch.cuda.synchronize()
    host = []
    for r in range(20):
        t0 = time.perf_counter()
        for _ in range(100): gpumode.dual_gemm_custom_kernel(data)
        host.append((time.perf_counter() - t0) / 100 * 1e6)
        torch.cuda.synchronize()
    ev = []
    for _ in range(50):
        flush.zero_()
        e0 = torch.cuda.Event(enable_timing=True); e1 = torch.cuda.Event(enable_timing=True)
        e0.record(); gpumode.dual_gemm_custom_kernel(data); e1.record(); e1.synchronize()
        ev.append(e0.elapsed_time(e1) * 1000)
    dg = hashlib.sha1(data[9].cpu().view(torch.int16).numpy().tobytes()).hexdigest()[:12]
    print(f"{tag} m {m} n {n} k {k} l {l}: host {statistics.median(host):6.2f} us/call (min {min(host):.2f}), "
          f"gpu {statistics.median(ev):7.2f} us, digest {dg}", flush=True)
