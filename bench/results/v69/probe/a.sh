#!/usr/bin/env bash
# v69 a (one H200, one call): what v68 prepared and could not run. Carry .carry/fp8 .carry/v105p .carry/v106t .carry/rp.
#   1. bench/micro/wgmma_fp8_exactness: FP8 wgmma (QGMMA m64n8k32 e4m3) exact on e2m1 values per k32 step?
#   2. Python GPU: test_api_surface (pack_pieces recipe's dropped-arrays check), the transformers tests (after the
#      one-formula _blocked_scales mend), feat/random-pieces' test_random_sequences.py (from .carry/rp);
#      extension of .carry/v105p (main's C++; d01c3fa changed no device code: SASS identical).
#   3. gtests of main's final C++ (.carry/v106t, d01c3fa): MoePieces*, MoeRandomPieces, CliGpu (now skips with reason).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
timeout 120 .carry/fp8/wgmma_fp8_exactness 2048 > $R/wgmma_fp8_exactness.txt 2>&1; echo "fp8 probe rc $? [$((SECONDS - t0)) s]"
cat $R/wgmma_fp8_exactness.txt | tail -40
V=/tmp/v105p; mkdir -p $V; xz -dc .carry/v105p/bins.tar.xz | tar xf - -C $V; cp $V/_fp4gemm*.so python/fp4gemm/
cp .carry/rp/test_random_sequences.py $R/../test_random_sequences_pieces.py
(cd tests/python && PYTHONPATH=../../python timeout 150 python3 -m pytest -q -rs -m gpu test_api_surface.py > $R/py_api.txt 2>&1; echo "py api rc $? [$((SECONDS - t0)) s]")
tail -3 $R/py_api.txt
(cd tests/python && PYTHONPATH=../../python timeout 200 python3 -m pytest -q -rs test_transformers_checkpoints.py test_transformers_gpu.py > $R/py_hf.txt 2>&1; echo "py hf rc $? [$((SECONDS - t0)) s]")
tail -4 $R/py_hf.txt
cp .carry/rp/test_random_sequences.py tests/python/
(cd tests/python && PYTHONPATH=../../python timeout 200 python3 -m pytest -q -m gpu test_random_sequences.py > $R/py_random.txt 2>&1; echo "py random (pieces) rc $? [$((SECONDS - t0)) s]")
tail -4 $R/py_random.txt
if [ -d .carry/v106t ]; then G=/tmp/v106t; mkdir -p $G; xz -dc .carry/v106t/bins.tar.xz | tar xf - -C $G
timeout 120 $G/gt --gtest_filter='MoePieces*:MoeRandomPieces*:CliGpu*:MoeLayerPieces*' > $R/gt_pieces.txt 2>&1; echo "gt pieces rc $? [$((SECONDS - t0)) s]"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" $R/gt_pieces.txt | head -12
fi
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
echo "done [$((SECONDS - t0)) s]"
