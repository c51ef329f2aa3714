#!/usr/bin/env bash
# v63 c1 (one H200, ~9 min): branch exp/desc-redux (the wgmma stage address through __reduce_max_sync except in the
# pointer-array GLU kernels) -- its C++ GPU tier (4 shards) and compute-sanitizer (scripts/device_carried.sh gpu
# sanitize), then the dense suite 3 rounds against 399676a and main (c0: dense2 +2 % once). Carry .carry/v82 (one solid
# xz: the branch's build laid out by scripts/carry_build.sh, plus cli_old / cli_new).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; V=/tmp/v82; mkdir -p $V
xz -dc .carry/v82/bins.tar.xz | tar xf - -C $V
mkdir -p .carry && rm -rf .carry/build .carry/pkg && cp -r $V/build $V/pkg .carry/
echo "unpacked [$((SECONDS - t0)) s]"
SHARDS=4 FP4GEMM_BUILD_DIR=/work/main-build OUT=$OUT/dc timeout 560 bash scripts/device_carried.sh gpu sanitize 2>&1 | tail -30
echo "checks [$((SECONDS - t0)) s]"
export FP4GEMM_DIGEST=1
mkdir -p $OUT/dense; for rnd in 1 2 3; do for side in A B D; do bin=$V/cli_old; [ $side = B ] && bin=$V/cli_new; [ $side = D ] && bin=.carry/build/tools/fp4gemm
  timeout 60 $bin bench --suite dense --no-peers --settle-ms 100 --json $OUT/dense/dense_$side$rnd.json > $OUT/dense/dense_$side$rnd.txt 2>&1; done; done
for f in $OUT/dense/dense_*.txt; do echo "$(basename $f) $(grep -E "^dense[12] " $f | awk "{print \$4}" | tr "\n" " ")"; done; echo "done [$((SECONDS - t0)) s]"
