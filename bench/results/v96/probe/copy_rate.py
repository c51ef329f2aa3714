"""v96: the GPU's device-to-device copy rate as issue 52 defines its HBM floor (read + write bytes counted), torch
only: 1 GiB tensors copied 50 times after 5 warm-up copies, median of 5 trials; printed with the GPU's name."""
import statistics
import torch

n = 1 << 30
a = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 255)
b = torch.empty_like(a)
for _ in range(5):
    b.copy_(a)
rates = []
for _ in range(5):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(50):
        b.copy_(a)
    e.record()
    e.synchronize()
    rates.append(2 * n * 50 / (s.elapsed_time(e) * 1e-3) / 1e12)
print(f"{torch.cuda.get_device_name()}: copy rate (read + write) {statistics.median(rates):.3f} TB/s "
      f"(trials {', '.join(f'{r:.3f}' for r in rates)})")
