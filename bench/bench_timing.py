"""Shared by the bench/ scripts: the median of CUDA-event times around `fn`, the L2 flushed (a 256 MB
write) before each repetition."""
import torch


def time_us(fn, iters=30, warmup=5):
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000)
    times.sort()
    return times[len(times) // 2]
