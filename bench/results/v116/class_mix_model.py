# Whole-tile makespan model (SchedulePolicy's narrow cost 365 + 1.7 tokens per k-block, tokens rounded up to 16 by
# class) of the MoE schedule at Qwen3 T 512: classes each on their own CTAs (optimal CTA split, whole tiles) against
# "upward absorption" (a tile may run in a CTA of a wider class, at that class's cost).
import numpy as np, itertools, math, sys
rng = np.random.default_rng(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
E, T, K, CTAS = 128, int(sys.argv[2]) if len(sys.argv) > 2 else 512, 8, 132
def w(c): return 365 + 1.7 * 16 * c
def whole(t, n):  # rounds of whole tiles
    return math.ceil(t / n) if t else 0
def best_split(tiles):  # tiles: {class: count}; min over CTA splits of max_c rounds_c * w(c)
    cls = sorted(tiles)
    best = (1e18, None)
    # search over makespan candidates: every rounds*w value
    cands = sorted({r * w(c) for c in cls for r in range(1, tiles[c] + 1)})
    for M in cands:
        need = sum(math.ceil(tiles[c] / max(1, int(M // w(c)))) if M >= w(c) else 10**9 for c in cls)
        if need <= CTAS: return M
    return None
def absorb(tiles):  # greedy: from the widest class down, the CTAs of class c run R_c = floor(M / w(c)) rounds;
    # their spare slots take tiles of narrower classes (widest first). Smallest feasible M.
    cls = sorted(tiles, reverse=True)
    cands = sorted({r * w(c) for c in cls for r in range(1, max(tiles.values()) + 1)})
    for M in cands:
        left = dict(tiles); used = 0; spare = []  # spare: slots in wider CTAs
        for c in cls:
            t = left[c]
            # fill spare slots of wider classes first (they cost w(wider) <= M per slot by construction)
            while t > 0 and spare:
                s = spare.pop(); take = min(s, t); t -= take
                if s > take: spare.append(s - take)
            if t == 0: continue
            if M < w(c): used = 10**9; break
            R = int(M // w(c)); n = math.ceil(t / R); used += n
            spare.append(n * R - t)
        if used <= CTAS: return M
    return None
for seed in range(int(sys.argv[3]) if len(sys.argv) > 3 else 5):
    ids = np.array([rng.choice(E, K, replace=False) for _ in range(T)])
    m = np.bincount(ids.ravel(), minlength=E)
    for name, rb in (("GEMM2 (N 2048)", 8), ("GEMM1 (N 1536)", 6)):
        tiles = {}
        for x in m:
            if x == 0: continue
            c = math.ceil(x / 16); tiles[c] = tiles.get(c, 0) + rb
        a, b = best_split(tiles), absorb(tiles)
        lb = sum(t * w(c) for c, t in tiles.items()) / CTAS
        print(f"seed {seed} {name}: classes {dict(sorted(tiles.items()))} lower bound {lb:.0f} split {a:.0f} ({a/lb:.3f}) absorb {b:.0f} ({b/lb:.3f}) -> {b/a-1:+.1%}")

def mixed_opt(t32, t48, w32=w(2), w48=w(3)):  # CTAs running tiles of both classes at their own widths (a cross-class claim)
    M = (t32 * w32 + t48 * w48) / CTAS
    while True:
        pats = [(int((M - b * w48) // w32), b) for b in range(int(M // w48) + 1)]
        ok = False
        for i, (a1, b1) in enumerate(pats):
            for (a2, b2) in pats[i:]:
                for x in range(CTAS + 1):
                    if x * a1 + (CTAS - x) * a2 >= t32 and x * b1 + (CTAS - x) * b2 >= t48: ok = True; break
                if ok: break
            if ok: break
        if ok: return M
        M += 1
print("own-width mixing, two patterns (GEMM2-like class counts):")
for t32, t48 in ((544, 472), (568, 456), (600, 424)):
    lb = (t32 * w(2) + t48 * w(3)) / CTAS
    print(t32, t48, f"lb {lb:.0f} whole-tile split {best_split({2: t32, 3: t48}):.0f} mixed {mixed_opt(t32, t48):.0f}")
