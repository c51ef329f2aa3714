#!/usr/bin/env bash
# Session 67, call 4 (one H200): fp4gemm.dual_gemm (the dual GEMM in one call behind the binding's call memo
# and plan cache; GPU MODE's dual drop-in now calls it instead of a Python plan dictionary): the Python GPU
# tests that touch it, the drop-in's host cost and GPU time against the previous package (.carry/pkgM, with
# the dictionary), and the decode path's crossover on DeepSeek-V3 (W4A4 and W4A16, T 1-8).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R; t0=$SECONDS
PYTHONPATH=$PWD/.carry/pkg timeout 240 python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_dual_gpu.py \
  tests/python/test_api_surface.py tests/python/test_cache.py tests/python/test_gpumode_args.py tests/python/test_gpu.py > $R/py.log 2>&1
echo "python rc=$? $((SECONDS - t0)) s"; grep -E "^(FAILED|ERROR)|passed|failed" $R/py.log | tail -8
for side in old new old new; do
  pkg=.carry/pkgM; [ $side = new ] && pkg=.carry/pkg
  PYTHONPATH=$PWD/$pkg timeout 60 python3 bench/results/v52/probe/dual_host_ab.py $side >> $R/dual_ab.txt 2>&1
done
echo "dual A/B $((SECONDS - t0)) s"; cat $R/dual_ab.txt
timeout 200 python3 bench/decode_crossover.py --cli .carry/build/tools/fp4gemm --models deepseek-v3 --acts nvfp4,bf16 \
  --tokens 1-6 --rounds 2 --json $R/crossover_deepseek.json > $R/crossover_deepseek.txt 2>&1
echo "crossover rc=$? $((SECONDS - t0)) s"; tail -25 $R/crossover_deepseek.txt
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
