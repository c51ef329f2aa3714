# Qwen3 T 512: whole 256-row tiles per class (today) vs letting some CTAs run a class's tiles as 128-row halves
# (each 256-row tile = two 128-row tiles costing f * w each; v36: NARROW_ROWS=128 everywhere was +16 %, so f ~ 0.58).
import math, sys
CTAS = 132
def w(c): return 365 + 1.7 * 16 * c
def today(t):
    for M in sorted({r * w(c) for c in t for r in range(1, t[c] + 1)}):
        if sum(math.ceil(t[c] / int(M // w(c))) for c in t if M >= w(c)) <= CTAS and all(M >= w(c) for c in t): return M
def halves(t, f):
    cands = sorted({r * w(c) * s for c in t for s in (1, f) for r in range(1, 2 * t[c] + 1)})
    for M in cands:
        if any(M < f * w(c) for c in t): continue
        need = 0
        for c, n in t.items():
            R1 = int(M // w(c)); R2 = int(M // (f * w(c)))
            best = 10**9
            for x in range(n + 1):  # x tiles whole, n - x as pairs of halves
                if x and R1 == 0: continue
                a = math.ceil(x / R1) if x else 0
                b = math.ceil(2 * (n - x) / R2) if n - x else 0
                best = min(best, a + b)
            need += best
        if need <= CTAS: return M
for f in (0.58, 0.55, 0.52):
    for t in ({2: 544, 3: 472}, {2: 568, 3: 456}, {2: 600, 3: 424}, {2: 408, 3: 354}, {2: 450, 3: 318}):
        lb = sum(n * w(c) for c, n in t.items()) / CTAS
        a, b = today(t), halves(t, f)
        print(f"f {f} {t}: bound {lb:.0f} today {a:.0f} ({a/lb:.3f}) with halves {b:.0f} ({b/lb:.3f}) {b/a-1:+.1%}")
