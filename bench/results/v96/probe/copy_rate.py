"""v96 / v97: the GPU's rates behind issue 52's floors, torch only, printed with the GPU's name and as a last line
`RATES <copy TB/s> <bf16 TFLOP/s>` for bench/issue52_rounds.py (--copy-rate-tbps, --bf16-tflops):
- copy rate (read + write bytes counted, as the issue defines its HBM floor): 1 GiB tensors copied 50 times after
  5 warm-up copies, median of 5 trials;
- cuBLAS bf16 rate: an 8192 x 8192 x 8192 bf16 matmul (torch.matmul, FP32 accumulation), 20 per trial after 5
  warm-up ones, median of 5 trials (a sustained figure: the power cap applies)."""
import statistics
import torch


def timed(fn, reps):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) * 1e-3


n = 1 << 30
a = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 255)
b = torch.empty_like(a)
for _ in range(5):
    b.copy_(a)
copy = [2 * n * 50 / timed(lambda: b.copy_(a), 50) / 1e12 for _ in range(5)]
del a, b
m = 8192
x = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
y = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
z = torch.empty(m, m, device="cuda", dtype=torch.bfloat16)
for _ in range(5):
    torch.matmul(x, y, out=z)
mm = [2 * m ** 3 * 20 / timed(lambda: torch.matmul(x, y, out=z), 20) / 1e12 for _ in range(5)]
name = torch.cuda.get_device_name()
print(f"{name}: copy rate (read + write) {statistics.median(copy):.3f} TB/s (trials {', '.join(f'{r:.3f}' for r in copy)})")
print(f"{name}: bf16 matmul {m}^3 {statistics.median(mm):.1f} TFLOP/s (trials {', '.join(f'{r:.1f}' for r in mm)})")
print(f"RATES {statistics.median(copy):.3f} {statistics.median(mm):.1f}")
