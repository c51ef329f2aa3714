#!/usr/bin/env bash
# v70 e (one H200): branch feat/pieces-nv9op (NVFP4 pieces decoded in 9 operations per word): its gtests (.carry/v111t:
# every pieces test, memcheck of them) and its CLI (.carry/v111c: the NVFP4 layer suite on pieces and rows, 3 rounds,
# the MXFP4 W4A4 / W4A16 ones on pieces once, with digests: all must equal v70 c's).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
if [ -f .carry/v111t/gt.xz ]; then
  G=/tmp/v111t; mkdir -p $G; [ -x $G/gt ] || { xz -dc .carry/v111t/gt.xz > $G/gt; chmod +x $G/gt; }
  timeout 240 $G/gt --gtest_filter='*Pieces*:*pieces*:*Nv*' > $R/gt_pieces.txt 2>&1
  echo "gt pieces rc $? [$((SECONDS - t0)) s]"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" $R/gt_pieces.txt | head -12
  timeout 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $G/gt \
    --gtest_filter='*Pieces*' > $R/memcheck.txt 2>&1
  echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -4
fi
if [ -f .carry/v111c/fp4gemm.xz ]; then
  C=/tmp/v111c; mkdir -p $C; xz -dc .carry/v111c/fp4gemm.xz > $C/fp4gemm; chmod +x $C/fp4gemm
  export FP4GEMM_DIGEST=1
  for rnd in 1 2 3; do for wl in pieces rows; do
    timeout 90 $C/fp4gemm bench --suite layer --act nvfp4 --weight-layout $wl --settle-ms 100 --json $R/layer_nvfp4_${wl}$rnd.json > $R/layer_nvfp4_${wl}$rnd.txt 2>&1
    echo "layer nvfp4 $wl r$rnd rc $? [$((SECONDS - t0)) s]"
  done; done
  for act in mxfp4 bf16; do
    timeout 90 $C/fp4gemm bench --suite layer --act $act --weight-layout pieces --settle-ms 100 --json $R/layer_${act}_pieces.json > $R/layer_${act}_pieces.txt 2>&1
    echo "layer $act pieces rc $? [$((SECONDS - t0)) s]"
  done
fi
gzip $R/*.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
