#!/usr/bin/env python3
"""v85: how many times the wide decode path would stream an expert, by slot width.

A slot is one expert's weights streamed once for up to `w` of its (token, pick) pairs, so a run streams
sum_e ceil(n_e / w) experts' weights. Routing drawn as the CLI's layer benchmark draws it (each token k distinct
experts, uniformly). Prints the mean slot count per width and its ratio to the wide path's count at its default bound
(gpt-oss-120b T 128, Qwen3-30B-A3B T 64: 8-pair slots). Used in docs/PERF.md v85 to size 16-pair slots."""
import numpy as np

rng = np.random.default_rng(1)


def slots(T, k, E, w, trials):
    total = 0
    for _ in range(trials):
        n = np.zeros(E, int)
        for _t in range(T):
            n[rng.choice(E, k, replace=False)] += 1
        total += int(np.sum((n + w - 1) // w))
    return total / trials


for name, E, k, T0, Ts in [("gpt-oss-120b", 128, 4, 128, [128, 256, 512]), ("Qwen3-30B-A3B", 128, 8, 64, [64, 128, 256, 512])]:
    base = slots(T0, k, E, 8, 200)
    for T in Ts:
        row = {w: slots(T, k, E, w, 50) for w in (8, 16, 24, 32)}
        mean_groups = row[8] / min(E, row[32])  # n8 column groups per streamed expert (one slot per expert)
        print(f"{name} T {T}: slots of 8 / 16 / 24 / 32 pairs {row[8]:.0f} / {row[16]:.0f} / {row[24]:.0f} / {row[32]:.0f}; "
              f"against 8-pair slots at T {T0} ({base:.0f}): {row[8] / base:.2f} / {row[16] / base:.2f}; "
              f"n8 groups per expert {mean_groups:.2f}")
