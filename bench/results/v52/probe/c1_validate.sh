#!/usr/bin/env bash
# Session 67, call 1 (nvidia-h200-x2): GPU-validates main f570fb1 (session 66's host-only commits:
# MoeLayerOptions::combine = false, EP review fixes), measures the EP cells again, runs the randomized
# GPU tier with its new expert_rows mode, and issue 51's open MoE cells (3 interleaved rounds, A = 399676a's
# CLI in .carry/cliOld, B = main's CLI .carry/build/tools/fp4gemm) on GPU 1 beside the C++ tests on GPU 0.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
t0=$SECONDS
( export CUDA_VISIBLE_DEVICES=1 FP4GEMM_DIGEST=1; R=/tmp/ab; mkdir -p $R
  for rnd in 1 2 3; do for side in A B; do
    bin=.carry/cliOld/fp4gemm; [ $side = B ] && bin=.carry/build/tools/fp4gemm
    timeout 120 $bin bench --suite moe --act nvfp4 --cases 3,5,12,45,54 --settle-ms 300 --json $R/moe_w4a4_$side$rnd.json > $R/moe_w4a4_$side$rnd.txt 2>&1
    timeout 120 $bin bench --suite moe --act bf16 --cases 7,22,47,54,55 --settle-ms 300 --json $R/moe_w4a16_$side$rnd.json > $R/moe_w4a16_$side$rnd.txt 2>&1
  done; done
  python3 .carry/probe/ab_compare.py $R > $R/compare.txt 2>&1; tar czf $OUT/moe_cells.tgz -C $R . ) > /tmp/c9.log 2>&1 &
C9=$!
wait_c9() { wait $C9; echo "moe cells done $((SECONDS - t0)) s"; tail -30 /tmp/ab/compare.txt; }
# bench/results/v51/probe/next_session_ep.sh's body: the C++ tests on GPU 0 first, then (after the cells) Python / EP on both
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/.carry/pkg" NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=/work/main-build; [ -e "$B" ] || { mkdir -p /work && ln -s "$PWD/.carry/build" "$B"; }
R=$OUT/r; mkdir -p $R
G=$(nvidia-smi -L | wc -l); nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $R/gpu.txt
BIN=.carry/build/tests/fp4gemm_gpu_tests
t0=$SECONDS
CUDA_VISIBLE_DEVICES=0 timeout 150 $BIN --gtest_filter='*EpExchange*:*MoeLayerExpertRows*:MoeLayerArgs*:*MoeLayerCases.*/case0' > $R/gtest.log 2>&1
echo "gtest rc=$? $((SECONDS - t0)) s"; grep -E "PASSED|FAILED" $R/gtest.log | head -6
CUDA_VISIBLE_DEVICES=0 timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 $BIN \
  --gtest_filter='*EpExchange*:*MoeLayerExpertRows*' > $R/memcheck.log 2>&1
echo "memcheck rc=$? $((SECONDS - t0)) s"; grep -E "ERROR SUMMARY|PASSED|FAILED" $R/memcheck.log | head -4
wait_c9; timeout 240 python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_ep_device_gpu.py tests/python/test_ep_torch.py \
  tests/python/test_api_surface.py > $R/py.log 2>&1
echo "python rc=$? $((SECONDS - t0)) s"; grep -E "^(FAILED|ERROR)|passed|failed|SKIPPED" $R/py.log | tail -6
for w in $(seq 2 2 $G | sort -rn); do
  for cfg in nvfp4:4096 bf16:4096 nvfp4:128 bf16:128; do
    act=${cfg%%:*}; t=${cfg##*:}; f=$R/ep${w}_${act}_${t}
    CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((w - 1))) timeout 150 torchrun --nproc-per-node $w examples/ep_moe.py --act $act \
      --tokens $t --steps 100 --check --json $f.json > $f.log 2>&1 || echo "(rc $?)"
    echo "== $w GPUs $act T $t ($((SECONDS - t0)) s)"; grep -E "^rank [0-9]+/|^one GPU|Error" $f.log | head -6; grep -h "^rank [0-9]*:" $f.log | sort | uniq -c | head -4
  done
done
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R

echo "== randomized GPU tier, 60 sequences ($((SECONDS - t0)) s)"
PYTHONPATH=$PWD/.carry/pkg FP4GEMM_RANDOM_LONG=60 timeout $(( (570 - (SECONDS - t0)) > 20 ? 570 - (SECONDS - t0) : 20 )) python3 -m pytest -q -rs -p no:cacheprovider \
  tests/python/test_random_sequences.py -k gpu_random > $OUT/random.log 2>&1; echo "random rc=$?"; tail -3 $OUT/random.log
echo "total $((SECONDS - t0)) s"
