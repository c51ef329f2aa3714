#!/usr/bin/env bash
# v102 (session 115), call 1 on a fresh machine (carry .carry/peers): the routing micro (bench/micro/routing_grid.cu:
# the single block against the grid form on 4-64 CTAs, T 128-4096), this card's copy rate, then main built there and
# issue 52's table -- triton_kernels' layer and fp4gemm's in the same process, two sustained rounds of 100
# (v95's table.sh). Call 2 (call2.sh, same warm machine) adds the burst round and Humming.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; mkdir -p $OUT/c1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,memory.total --format=csv,noheader | tee $OUT/c1/gpu.txt
OUT=$OUT/c1 bash bench/results/v99/probe/routing.sh > /dev/null 2>&1; echo "routing micro rc $? [$((SECONDS - t0)) s]"
cat $OUT/c1/routing/run1.txt
python3 bench/results/v96/probe/copy_rate.py > $OUT/c1/copy_rate.txt 2>&1; tail -3 $OUT/c1/copy_rate.txt
echo "[$((SECONDS - t0)) s]"
ROUND_REPS="100 100" HM=0 SMOKE=0 MAXB=${MAXB:-300} NAME=c1_table bash bench/results/v95/probe/table.sh
tar czf $OUT/c1.tgz -C $OUT c1; echo "call1 done [$((SECONDS - t0)) s]"
