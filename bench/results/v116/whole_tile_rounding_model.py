# Whole-tile rounding of the MoE schedule at T 4096 (uniform top-k routings), SchedulePolicy's costs: wide tiles
# (> 128 tokens, 128 rows) 165 + 1.28 t per k-block, narrow (<= 128, 256 rows) 365 + 1.7 t; t rounded up to 16.
import numpy as np, math, sys
CTAS = 132
def w(c): t = 16 * c; return (365 + 1.7 * t) if t <= 128 else (165 + 1.28 * t)
def rows(c): return 256 if 16 * c <= 128 else 128
def split(m):
    count = -(-m // 256); size = (-(-m // count) + 7) // 8 * 8
    return [size] * (count - 1) + [m - (count - 1) * size]
def today(t):
    cands = sorted({r * w(c) for c in t for r in range(1, t[c] + 1)})
    for M in cands:
        if any(M < w(c) for c in t): continue
        if sum(math.ceil(t[c] / int(M // w(c))) for c in t) <= CTAS: return M
rng = np.random.default_rng(7)
for name, E, T, K, N1, N2 in (("Qwen3", 128, 4096, 8, 1536, 2048), ("gpt-oss", 128, 4096, 4, 5760, 2880), ("gpt-oss", 128, 512, 4, 5760, 2880), ("Qwen3", 128, 1024, 8, 1536, 2048)):
    for seed in range(2):
        ids = np.array([rng.choice(E, K, replace=False) for _ in range(T)])
        m = np.bincount(ids.ravel(), minlength=E)
        for g, N in (("GEMM1", N1), ("GEMM2", N2)):
            t = {}
            for x in m:
                for s in split(int(x)):
                    c = -(-s // 16); t[c] = t.get(c, 0) + -(-N // rows(c))
            lb = sum(n * w(c) for c, n in t.items()) / CTAS
            M = today(t)
            print(f"{name} T {T} {g}: {len(t)} classes, {sum(t.values())} tiles, {sum(t.values())/CTAS:.1f} per CTA; whole-tile makespan {M/lb:.3f} of the bound")
