#!/usr/bin/env bash
# v66 c1 (one H200): issue 51's last cell -- mixtral down (E 8, N 4096, K 14336, top-2), class 9 alone (R 272, balanced)
# and the uniform T 1024 cell -- for A = 399676a, M = main (8aa7f4a's kernels), S = main with a `nanosleep.u32 0` at the
# top of every k-block of the fused consumer loops (-DFP4GEMM_EXP_NANOSLEEP on the two MoE units: 399676a's k-loops had
# a YIELD there, main's have none since the GLU split). W4A16 and W4A4 NVFP4, 3 rounds interleaved, 100 iterations.
# Carry .carry/v92 (cli_old, cli_main, cli_NS).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v92; mkdir -p $V; xz -dc .carry/v92/bins.tar.xz | tar xf - -C $V; t0=$SECONDS
R=$OUT/r; mkdir -p $R
for rnd in 1 2 3; do for cell in 272 U; do for act in bf16 nvfp4; do for side in old main NS; do
  if [ $cell = U ]; then args="--tokens 1024 --routing uniform"; else args="--tokens 1088 --routing balanced"; fi
  t=$(timeout 60 $V/cli_$side moe --experts 8 --n 4096 --k 14336 --topk 2 $args --act $act --scales linear --out f16 \
      --values full --iters 100 2>&1 | grep -oE "^time: [0-9.]+" | awk '{print $2}')
  echo "$rnd $cell $act $side $t"
done; done; done; done | tee $R/cells.txt
python3 - $R/cells.txt <<'PY'
import sys, collections, statistics
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 5: t[(f[1], f[2], f[3])].append(float(f[4]))
for c in ["272", "U"]:
    for a in ["bf16", "nvfp4"]:
        m = {s: statistics.median(t[(c, a, s)]) for s in ["old", "main", "NS"]}
        print(f"{c:>4} {a:5} old {m['old']:.2f} main {m['main']:.2f} ({m['main']/m['old']-1:+.2%}) NS {m['NS']:.2f} ({m['NS']/m['old']-1:+.2%})")
PY
echo "done [$((SECONDS - t0)) s]"
