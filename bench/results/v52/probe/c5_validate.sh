#!/usr/bin/env bash
# Session 67, call 5 (one H200): (1) fp4gemm.dual_gemm with the batch views made in C++: the Python GPU tests
# that touch it and the drop-in's host cost against the package with the Python dictionary (.carry/pkgM);
# (2) the decode path's crossover on Mixtral (W4A4, W4A16, T 1-4) beside v52's DeepSeek-V3 figures;
# (3) if .carry/cliR exists (branch exp/desc-uniform: the plain MoE kernels' wgmma descriptors), issue 51's
# open MoE cells in 3 interleaved rounds against main's CLI, with digests.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R; t0=$SECONDS
PYTHONPATH=$PWD/.carry/pkg timeout 200 python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_dual_gpu.py \
  tests/python/test_api_surface.py tests/python/test_cache.py tests/python/test_gpumode_args.py tests/python/test_dual_host.py > $R/py.log 2>&1
echo "python rc=$? $((SECONDS - t0)) s"; grep -E "^(FAILED|ERROR)|passed|failed" $R/py.log | tail -8
for side in old new old new; do
  pkg=.carry/pkgM; [ $side = new ] && pkg=.carry/pkg
  PYTHONPATH=$PWD/$pkg timeout 60 python3 bench/results/v52/probe/dual_host_ab.py $side >> $R/dual_ab.txt 2>&1
done
echo "dual A/B $((SECONDS - t0)) s"; cat $R/dual_ab.txt
timeout 150 python3 bench/decode_crossover.py --cli .carry/build/tools/fp4gemm --models mixtral-8x7b --acts nvfp4,bf16 \
  --tokens 1-4 --rounds 2 --json $R/crossover_mixtral.json > $R/crossover_mixtral.txt 2>&1
echo "crossover rc=$? $((SECONDS - t0)) s"; tail -12 $R/crossover_mixtral.txt
if [ -x .carry/cliR/fp4gemm ]; then
  export FP4GEMM_DIGEST=1; A=/tmp/abR; mkdir -p $A
  for rnd in 1 2 3; do for side in B R; do
    bin=.carry/build/tools/fp4gemm; [ $side = R ] && bin=.carry/cliR/fp4gemm
    timeout 100 $bin bench --suite moe --act nvfp4 --cases 3,5,12,45,54 --settle-ms 300 --json $A/moe_w4a4_$side$rnd.json > $A/moe_w4a4_$side$rnd.txt 2>&1
    timeout 100 $bin bench --suite moe --act bf16 --cases 7,22,47,54,55 --settle-ms 300 --json $A/moe_w4a16_$side$rnd.json > $A/moe_w4a16_$side$rnd.txt 2>&1
  done; done
  echo "R/B cells $((SECONDS - t0)) s"
  cp -r $A $R/desc_cells
fi
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
