#!/usr/bin/env bash
# v65 c3 (one H200): the build with the MoE units at ptxas register-usage level 10 and the trace-build fix (main-build
# on the CPU machine, laid out by scripts/carry_build.sh, one solid xz .carry/v90/bins.tar.xz; cli_old = 399676a in
# .carry/v90/old.tar.xz): (1) issue 51's cell and its class 9 again, A = 399676a against N, W4A16 and W4A4 NVFP4,
# 3 interleaved rounds; (2) the C++ GPU tier (4 shards), compute-sanitizer memcheck and the Python tier
# (scripts/device_carried.sh gpu sanitize python).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; mkdir -p .carry /tmp/v90 $OUT/r
xz -dc .carry/v90/bins.tar.xz | tar xf - -C .carry
xz -dc .carry/v90/old.tar.xz | tar xf - -C /tmp/v90
for rnd in 1 2 3; do for R_ in 272 U; do for act in bf16 nvfp4; do for side in A N; do
  b=/tmp/v90/cli_old; [ $side = N ] && b=.carry/build/tools/fp4gemm
  if [ $R_ = U ]; then args="--tokens 1024 --routing uniform"; else args="--tokens $((4 * R_)) --routing balanced"; fi
  t=$(timeout 60 $b moe --experts 8 --n 4096 --k 14336 --topk 2 $args --act $act --scales linear --out f16 \
      --values full --iters 100 2>&1 | grep -oE "^time: [0-9.]+" | awk '{print $2}')
  echo "$rnd $R_ $act $side $t"
done; done; done; done | tee $OUT/r/cell.txt
echo "cell [$((SECONDS - t0)) s]"
SHARDS=4 FP4GEMM_BUILD_DIR=/work/main-build OUT=$OUT/r/dc timeout $((585 - SECONDS + t0)) bash scripts/device_carried.sh gpu sanitize python 2>&1 | tail -30
(cd $OUT && tar czf r.tgz r && rm -rf r)
echo "done [$((SECONDS - t0)) s]"
