#!/usr/bin/env bash
# Prepared for the next session (not run): branch feat/pieces-nvfp4 (c8f2189: the NVFP4 decode kernels on pieces, and
# W4A4's in-place intermediate quantiser in the pieces' k order, so the layer takes pieces in every format). One H200,
# two calls back to back:
#   call 1, carry .carry/v103t (the branch's gtests): the pieces tests (MoeLayerPieces now with NVFP4 W4A4 blocked and
#     linear and MXFP4 W4A4, both paths, the repack update), the decode and layer suites, then memcheck of MoeLayerPieces
#     (--report-api-errors no: the bad-buffer probes' API errors are expected);
#   call 2, carry .carry/v103c (the branch's CLI): the layer suite W4A4 NVFP4 / MXFP4 and W4A16, rows (A) against pieces (B),
#     2 rounds, digests (NVFP4 pieces on the decode path: equal bytes on GPU MODE values, the suites' data).
# Usage: bash bench/results/v67/probe/next_session_nvfp4.sh 1   (then ... 2)
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v103; mkdir -p $V; t0=$SECONDS; R=$OUT/r; mkdir -p $R/ab
if [ "${1:-1}" = 1 ]; then
  xz -dc .carry/v103t/bins.tar.xz | tar xf - -C $V
  timeout 300 $V/fp4gemm_gpu_tests --gtest_filter='MoeLayerPieces.*:MoePieces.*:MoeLayerDecode.*:All/MoeLayerCases*:MoeLayerGraph*:MoeLayerBiases*' > $R/tests.txt 2>&1
  echo "tests rc $? [$((SECONDS - t0)) s]"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests from .* ran" $R/tests.txt | head -20
  timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $V/fp4gemm_gpu_tests \
    --gtest_filter='MoeLayerPieces.*' > $R/memcheck.txt 2>&1
  echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -4
else
  xz -dc .carry/v103c/bins.tar.xz | tar xf - -C $V
  export FP4GEMM_DIGEST=1
  for rnd in 1 2; do for act in nvfp4 mxfp4 bf16; do for wl in rows pieces; do s=A; [ $wl = pieces ] && s=B
    timeout 100 $V/fp4gemm bench --suite layer --act $act --weight-layout $wl --settle-ms 100 --json $R/ab/layer_${act}_${s}$rnd.json > $R/ab/layer_${act}_${s}$rnd.txt 2>&1
  done; done; echo "round $rnd [$((SECONDS - t0)) s]"; done
  for act in nvfp4 mxfp4 bf16; do mkdir -p $R/$act; cp $R/ab/layer_${act}_* $R/$act/; for f in $R/$act/*; do mv $f ${f/layer_${act}_/layer_}; done
    echo "== $act"; python3 bench/results/v50/probe/ab_compare.py $R/$act; done
fi
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
