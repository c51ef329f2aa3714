#!/usr/bin/env bash
# v63 c2 (one H200, ~8 min): exp/desc-redux's Python GPU tier; issue 52's general-path cells (tk_layer T 64 / 512 / 4096,
# both models, the branch's package); and why mixtral down T 1024 stays 2-4 % slower than 399676a (c0): the CLI `moe`
# command A/B and ncu (SOL, warp states, occupancy) of its GEMM kernel for 399676a and the branch. Carry .carry/v82
# (as c1) and .peers.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; V=/tmp/v82; mkdir -p $V $OUT/r
xz -dc .carry/v82/bins.tar.xz | tar xf - -C $V
mkdir -p .carry && rm -rf .carry/build .carry/pkg && cp -r $V/build $V/pkg .carry/
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD/.carry/pkg
mkdir -p /work/main-build && ln -sfn $PWD/.carry/build/tools /work/main-build/tools
timeout 240 python3 -m pytest -q -m gpu tests/python -rs -p no:cacheprovider > $OUT/r/pytest_gpu.txt 2>&1
echo "pytest rc=$? [$((SECONDS - t0)) s]"; tail -4 $OUT/r/pytest_gpu.txt
M="moe --experts 8 --n 4096 --k 14336 --tokens 1024 --topk 2 --scales linear --out f16 --values full --iters 100"
for rnd in 1 2; do for side in A D; do bin=$V/cli_old; [ $side = D ] && bin=.carry/build/tools/fp4gemm
  for act in bf16 nvfp4; do timeout 60 $bin $M --act $act > $OUT/r/moe_${act}_$side$rnd.txt 2>&1
    echo "$act $side$rnd $(grep -m1 -iE '^time|median' $OUT/r/moe_${act}_$side$rnd.txt)"; done; done; done
for side in A D; do bin=$V/cli_old; [ $side = D ] && bin=.carry/build/tools/fp4gemm
  timeout 120 ncu --clock-control none -k regex:fused_grouped_gemm --launch-skip 5 -c 1 --section SpeedOfLight --section WarpStateStats \
    --section Occupancy --section LaunchStats --section SchedulerStats $bin $M --act bf16 --iters 3 --warmup 5 > $OUT/r/ncu_bf16_$side.txt 2>&1
  echo "ncu $side rc=$? $(grep -E 'Duration|Registers Per|Achieved Occupancy|Issue Slots Busy' $OUT/r/ncu_bf16_$side.txt | tr -s ' ' | tr '\n' ';')"; done
echo "[$((SECONDS - t0)) s]"
OUTK=$OUT/r/tk PYTHONPATH=$PWD/.carry/pkg:$PWD/.peers OUT=$OUT/r/tk TKL_TOKENS=64,512,4096 TKL_REPS=100 TKL_SILU=0 TKL_BUDGET_S=170 \
  timeout 230 python3 .peers/tk_layer.py > $OUT/r/tk_layer.txt 2>&1
echo "tk rc=$? [$((SECONDS - t0)) s]"; tail -25 $OUT/r/tk_layer.txt
