#!/usr/bin/env bash
# v65 c1 (one H200): (1) issue 51's bisect, round 1: the CLI at 399676a (+ the digest patch), acd61ac, 1b9f495,
# aefe22d and b848b3a (main's kernels), built on the CPU machine and carried in two calls back to back (the 64 MiB limit;
# .carry/v88a then .carry/v88b, each one solid xz, unpacked to /tmp/v88, which the warm machine keeps; the first call
# only unpacks);
# mixtral down (E 8, N 4096, K 14336, top-2) W4A16: R 272 rows per expert with balanced routing (class 9 only), R 256
# (class 16 only) and the uniform T 1024 cell; 3 interleaved rounds, 100 iterations each. If the carry holds a trace
# CLI (cli_trace: main with -DFP4GEMM_TRACE=ON) its per-CTA phases at R 272 too. (2) main e315b7f's Python tier
# (scripts/device_carried.sh python) when .carry/pkg is carried too.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; V=/tmp/v88; mkdir -p $V $OUT/bisect
for d in .carry/v88a .carry/v88b; do [ -f $d/bins.tar.xz ] && xz -dc $d/bins.tar.xz | tar xf - -C $V; done
echo "unpacked [$((SECONDS - t0)) s]"; ls $V
[ $(ls $V | grep -c cli_) -lt 5 ] && { echo "not all five CLIs here yet: unpacked only"; exit 0; }
bins=$(cd $V && ls cli_* | grep -v trace)
for rnd in 1 2 3; do for cell in 272 256 U; do for b in $bins; do
  if [ $cell = U ]; then args="--tokens 1024 --routing uniform"; else args="--tokens $((4 * cell)) --routing balanced"; fi
  t=$(timeout 60 $V/$b moe --experts 8 --n 4096 --k 14336 --topk 2 $args --act bf16 --scales linear --out f16 --values full \
      --iters 100 2>&1 | grep -oE "^time: [0-9.]+" | awk '{print $2}')
  echo "$rnd $cell $b $t"
done; done; done | tee $OUT/bisect/times.txt
echo "bisect [$((SECONDS - t0)) s]"
if [ -x $V/cli_trace ]; then
  for args in "--tokens 1088 --routing balanced" "--tokens 1024 --routing uniform"; do
    echo "== $args" >> $OUT/bisect/trace_main.txt
    timeout 60 $V/cli_trace moe --experts 8 --n 4096 --k 14336 --topk 2 $args --act bf16 --scales linear --out f16 \
      --values full --iters 20 >> $OUT/bisect/trace_main.txt 2>&1
  done
  (cd $OUT/bisect && gzip trace_main.txt)
fi
[ -d .carry/pkg/fp4gemm ] && FP4GEMM_BUILD_DIR=/work/main-build OUT=$OUT/dc timeout $((590 - SECONDS + t0)) bash scripts/device_carried.sh python 2>&1 | tail -20
echo "done [$((SECONDS - t0)) s]"
