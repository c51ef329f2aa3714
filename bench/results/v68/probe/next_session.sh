#!/usr/bin/env bash
# Prepared for the next session (not run: v68's device time ran out). One H200, one call, carry .carry/fp8 and
# .carry/v105p (main's extension; its C++ is unchanged since 497b4ec):
#   1. bench/micro/wgmma_fp8_exactness (built: nvcc -std=c++17 -O2 -gencode arch=compute_90a,code=sm_90a): is FP8 wgmma
#      exact on e2m1 values per k32 step (issue 52's MXFP4 x MXFP4 idea)? Prints mismatch counts per data and mode.
#   2. the pack_pieces API-surface recipe on the GPU (its new dropped-arrays lifetime check has not run yet);
#   3. branch feat/random-pieces' test_random_sequences.py (a third of the GPU sequences' layers on weights in pieces,
#      repacked after in-place updates), copied from .carry/rp (carry it too): merge the branch if it passes.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
timeout 120 .carry/fp8/wgmma_fp8_exactness 2048 > $R/wgmma_fp8_exactness.txt 2>&1; echo "fp8 probe rc $? [$((SECONDS - t0)) s]"
cat $R/wgmma_fp8_exactness.txt
V=/tmp/v105p; mkdir -p $V; xz -dc .carry/v105p/bins.tar.xz | tar xf - -C $V; cp $V/_fp4gemm*.so python/fp4gemm/
(cd tests/python && PYTHONPATH=../../python timeout 300 python3 -m pytest -q -m gpu test_api_surface.py > $R/py_api.txt 2>&1; echo "py api rc $? [$((SECONDS - t0)) s]")
tail -3 $R/py_api.txt
if [ -f .carry/rp/test_random_sequences.py ]; then
  cp .carry/rp/test_random_sequences.py tests/python/
  (cd tests/python && PYTHONPATH=../../python timeout 300 python3 -m pytest -q -m gpu test_random_sequences.py > $R/py_random.txt 2>&1; echo "py random (pieces) rc $? [$((SECONDS - t0)) s]")
  tail -4 $R/py_random.txt
fi
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
