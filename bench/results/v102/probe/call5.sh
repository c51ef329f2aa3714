#!/usr/bin/env bash
# v102 (session 115), call 5: bench/micro/gather_rows.cu with variants 3 (bulk copies per k-block, reordered in
# padded shared memory) and 4 (the gather without the reorder: its copy ceiling) beside the library's kernel (v0).
# Seconds. Logs under $OUT/gather.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p $OUT/gather
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader | tee $OUT/gather/gpu.txt
nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a bench/micro/gather_rows.cu -o /tmp/gr \
  > $OUT/gather/build.txt 2>&1 || { tail $OUT/gather/build.txt; exit 3; }
timeout 200 /tmp/gr ${REPS:-50} 2>&1 | tee $OUT/gather/run1.txt
[ "${MEMCHECK:-1}" = 1 ] && timeout 200 compute-sanitizer --tool memcheck /tmp/gr 2 > $OUT/gather/memcheck.txt 2>&1; \
  grep -E "ERROR SUMMARY|WRONG" $OUT/gather/memcheck.txt | head -5
