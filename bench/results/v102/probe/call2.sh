#!/usr/bin/env bash
# v102 (session 115), call 2 on call 1's warm machine (carry .carry/peers; /tmp/b holds call 1's build, else it
# builds again): the burst round (20 reps) of issue 52's table, and Humming 0.1.19 in the same call
# (bench/humming_layer.py, the wheel in .carry/peers/wheels). ROUND_REPS overrides the rounds (e.g. "100 100 20"
# where call 1 found no time for its rounds).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -f /tmp/b/built ] && echo "call 1's build found" || echo "no build on this machine: building"
ROUND_REPS="${ROUND_REPS:-20}" HM=${HM:-1} SMOKE=0 MAXB=9999 NAME=c2_table bash bench/results/v95/probe/table.sh
