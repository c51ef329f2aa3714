#!/usr/bin/env bash
# v53 call 6 (one H200): main + the combine's batched loads (built on the CPU machine, .carry/build, .carry/pkg):
# the layer's decode / bias / graph / case tests, memcheck of the decode test, the randomized GPU tier (fresh seed)
# and the layer's Python GPU tests.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/r; mkdir -p $R; t0=$SECONDS
snap() { tar czf $OUT/r.tgz -C $OUT r; echo "[$((SECONDS - t0)) s] $1"; }
T=.carry/build/tests/fp4gemm_gpu_tests
timeout 100 $T --gtest_filter='MoeLayerDecode*:MoeLayerBiases*:MoeLayerGraph*:MoeLayerArgs*:MoeLayerExpertRows*' > $R/gtest.log 2>&1; echo "gtest rc=$?" | tee -a $R/rc.txt; snap gtest
timeout 90 compute-sanitizer --tool memcheck $T --gtest_filter='MoeLayerDecode.EveryTokenCount*' > $R/memcheck.log 2>&1; echo "memcheck rc=$?" | tee -a $R/rc.txt; snap memcheck
export PYTHONPATH=$PWD/.carry/pkg
FP4GEMM_RANDOM_LONG=80 FP4GEMM_RANDOM_SEED=5306 timeout 120 python3 -m pytest -q -x -m gpu tests/python/test_random_sequences.py > $R/random.log 2>&1; echo "random rc=$?" | tee -a $R/rc.txt; snap random
timeout 120 python3 -m pytest -q -x -m gpu tests/python/test_moe_layer_gpu.py > $R/py_layer.log 2>&1; echo "py layer rc=$?" | tee -a $R/rc.txt; snap done
