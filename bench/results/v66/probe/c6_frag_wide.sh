#!/usr/bin/env bash
# v66 c6 (one H200): exp/decode-frag on the wide-hidden shapes -- Mixtral-8x7B (E 8, H 4096, I 14336, top-2, T 1-3:
# its decode bound) and DeepSeek-V3 (E 256, H 7168, I 2048, top-8, T 1-4), W4A16 checkpoint values, linear scales,
# silu; M = main's CLI, F = the branch with FP4GEMM_EXP_DECODE_FRAG=1; 2 rounds interleaved. Carry .carry/v95.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v95; mkdir -p $V; xz -dc .carry/v95/bins.tar.xz | tar xf - -C $V; t0=$SECONDS
X="layer --experts 8 --hidden 4096 --inter 14336 --topk 2 --activation silu"
D="layer --experts 256 --hidden 7168 --inter 2048 --topk 8 --activation silu"
for rnd in 1 2; do for m in x d; do S=$X; [ $m = d ] && S=$D; Ts="1 2 3"; [ $m = d ] && Ts="1 2 4"
  for t in $Ts; do for sd in M F; do
    b=$V/cli_frag; env=FP4GEMM_EXP_DECODE_FRAG=1; [ $sd = M ] && b=$V/cli_main env=X=1
    echo "$rnd $m $t $sd $(env $env timeout 60 $b $S --act bf16 --values checkpoint --scales linear --iters 100 --tokens $t 2>&1 | grep -oE '^time: [0-9.]+' | awk '{print $2}')"
  done; done
done; done | tee $OUT/times.txt
python3 - $OUT/times.txt <<'PY'
import sys, collections
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 5 and f[4] != "": t[(f[1], f[2], f[3])].append(float(f[4]))
for (m, T) in sorted({(k[0], k[1]) for k in t}):
    a, b = sum(t[(m, T, "M")]) / len(t[(m, T, "M")]), sum(t[(m, T, "F")]) / len(t[(m, T, "F")])
    print(f"{'Mixtral' if m == 'x' else 'DeepSeek-V3':11} T {T}  M {a:7.2f}  F {b:7.2f}  ({b / a - 1:+.1%}, {b - a:+.2f} us)")
PY
echo "done [$((SECONDS - t0)) s]"
