#!/usr/bin/env bash
# v67 c1b (one H200, right after c1; carry .carry/v102p): (1) the Python GPU tests that touch pieces, with the
# extension module built on the CPU machine placed beside the package sources: the API surface's GPU variant (its
# pack_pieces recipe) and the layer tier's host-composition and decode tests; (2) compute-sanitizer memcheck of
# c1's gtest binary on the pieces tests.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
V=/tmp/v102; mkdir -p $V; xz -dc .carry/v102p/bins.tar.xz | tar xf - -C $V; ls $V
t0=$SECONDS; R=$OUT/r; mkdir -p $R
cp $V/_fp4gemm*.so python/fp4gemm/
(cd tests/python && PYTHONPATH=../../python timeout 150 python3 -m pytest -q -x test_api_surface.py -k "test_gpu_api_surface" > $R/py_surface.txt 2>&1; echo "py surface rc $? [$((SECONDS - t0)) s]")
tail -5 $R/py_surface.txt
(cd tests/python && PYTHONPATH=../../python timeout 90 python3 -m pytest -q test_moe_layer_gpu.py -k "matches_the_host or decode_path" > $R/py_layer.txt 2>&1; echo "py layer rc $? [$((SECONDS - t0)) s]")
tail -3 $R/py_layer.txt
if [ -x $V/fp4gemm_gpu_tests ]; then
  timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 $V/fp4gemm_gpu_tests \
    --gtest_filter='MoePieces.BadArgumentsNamed:MoeLayerPieces.*:MoeGluPiecesShapes.*' > $R/memcheck.txt 2>&1
  echo "memcheck rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.txt | head -5
else echo "no gtest binary (a cold machine)"; fi
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
