#!/usr/bin/env bash
# v67 c3: issue 51's cell (mixtral down, N 4096, K 14336, E 8, top-2; T 1024 uniform and R 272 = T 1088 balanced),
# linear scales, f16 out, full-range values, 100 reps) for 399676a (cli_old, .carry/v92) and feat/pieces (c1's
# /tmp/v102/fp4gemm: rows and --weight-layout pieces), W4A16 / W4A4 NVFP4, 3 rounds interleaved.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v92; mkdir -p $V; xz -dc .carry/v92/bins.tar.xz | tar xf - -C $V
[ -x /tmp/v102/fp4gemm ] || { echo "no /tmp/v102 (a cold machine): run c1 first"; exit 0; }
t0=$SECONDS; R=$OUT/r; mkdir -p $R
for rnd in 1 2 3; do for cell in 272 U; do for act in bf16 nvfp4; do for side in old rows pieces; do
  if [ $cell = U ]; then args="--tokens 1024 --routing uniform"; else args="--tokens 1088 --routing balanced"; fi
  b=/tmp/v102/fp4gemm; extra=""; [ $side = old ] && b=$V/cli_old; [ $side = pieces ] && extra="--weight-layout pieces"
  echo "$rnd $cell $act $side $(timeout 60 $b moe --experts 8 --n 4096 --k 14336 --topk 2 $args --act $act --scales linear --out f16 --values full --iters 100 $extra 2>&1 | grep -oE '^time: [0-9.]+' | awk '{print $2}')"
done; done; done; done > $R/cells.txt
python3 - $R/cells.txt <<'PY'
import sys, collections, statistics
t = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 5: t[(f[1], f[2], f[3])].append(float(f[4]))
for c in ["272", "U"]:
    for a in ["bf16", "nvfp4"]:
        o, m, p = (statistics.median(t[(c, a, s)]) for s in ["old", "rows", "pieces"])
        print(f"{c:>4} {a:5} 399676a {o:.2f}  rows {m:.2f} ({m / o - 1:+.2%})  pieces {p:.2f} ({p / o - 1:+.2%})")
PY
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
