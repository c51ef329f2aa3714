#!/usr/bin/env bash
# v66 c5 (one H200): issue 51's last cell, 399676a (old) against main (8aa7f4a's kernels), 6 more rounds interleaved:
# mixtral down R 272 (class 9) and the uniform T 1024 cell, W4A16 and W4A4 NVFP4, 100 iterations each. Carry .carry/v92.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v92; mkdir -p $V; xz -dc .carry/v92/bins.tar.xz | tar xf - -C $V; t0=$SECONDS
R=$OUT/r; mkdir -p $R
for rnd in 1 2 3 4 5 6; do for cell in 272 U; do for act in bf16 nvfp4; do for side in old main; do
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
        m = {s: statistics.median(t[(c, a, s)]) for s in ["old", "main"]}
        print(f"{c:>4} {a:5} old {m['old']:.2f} main {m['main']:.2f} ({m['main']/m['old']-1:+.2%})")
PY
echo "done [$((SECONDS - t0)) s]"
