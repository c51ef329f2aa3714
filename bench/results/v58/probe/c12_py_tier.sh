#!/usr/bin/env bash
# The whole Python GPU tier and the layer / decode / CLI gtests on 1efc4d5's build (.carry/build, .carry/pkg).
set -uo pipefail
R=$OUT/r; mkdir -p $R
export PYTHONPATH=$PWD/.carry/pkg FP4GEMM_CLI=$PWD/.carry/build/tools/fp4gemm
timeout 330 python3 -m pytest -q -m gpu tests/python -x -p no:cacheprovider > $R/py_gpu.log 2>&1; echo "py gpu rc=$?: $(tail -1 $R/py_gpu.log)"
tar czf $OUT/r.tgz -C $OUT r
timeout 150 .carry/build/tests/fp4gemm_gpu_tests --gtest_filter='*Layer*:*Decode*:CliGpu*:*Quantiz*' > $R/gtest.log 2>&1
echo "gtest rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' $R/gtest.log | tr '\n' ' ')"
tar czf $OUT/r.tgz -C $OUT r
