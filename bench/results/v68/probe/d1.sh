#!/usr/bin/env bash
# v68 d1/d2: feat/pieces-nvfp4 with the NVFP4 blocked pieces codes through the ring (carry .carry/v104t gtests for 1,
# .carry/v104c CLI for 2). 1: pieces / decode / layer tests + memcheck; 2: layer suite nvfp4 / mxfp4 / bf16 rows (A)
# against pieces (B), 2 rounds, digests.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v104; mkdir -p $V; t0=$SECONDS; R=$OUT/r; mkdir -p $R/ab
if [ "${1:-1}" = 1 ]; then
  xz -dc .carry/v104t/bins.tar.xz | tar xf - -C $V
  timeout 300 $V/gt --gtest_filter='MoeLayerPieces.*:MoePieces.*:MoeLayerDecode.*:All/MoeLayerCases*:MoeLayerGraph*:MoeLayerBiases*' > $R/tests.txt 2>&1
  echo "tests rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests from .* ran" $R/tests.txt | head -20
  timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $V/gt \
    --gtest_filter='MoeLayerPieces.*' > $R/memcheck.txt 2>&1
  echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -4
else
  xz -dc .carry/v104c/bins.tar.xz | tar xf - -C $V
  export FP4GEMM_DIGEST=1
  for rnd in 1 2; do for act in nvfp4 mxfp4 bf16; do for wl in rows pieces; do s=A; [ $wl = pieces ] && s=B
    timeout 100 $V/fp4gemm bench --suite layer --act $act --weight-layout $wl --settle-ms 100 --json $R/ab/layer_${act}_${s}$rnd.json > $R/ab/layer_${act}_${s}$rnd.txt 2>&1
  done; done; echo "round $rnd [$((SECONDS - t0)) s]"; done
  for act in nvfp4 mxfp4 bf16; do mkdir -p $R/$act; cp $R/ab/layer_${act}_* $R/$act/; for f in $R/$act/*; do mv $f ${f/layer_${act}_/layer_}; done
    echo "== $act"; python3 bench/results/v50/probe/ab_compare.py $R/$act; done
fi
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
