#!/usr/bin/env bash
# v104: main's whole C++ GPU tier in 4 parallel shards (one binary at 400 s timed out in the slow reference suites),
# the CPU-built test binary of main (.carry/gt_main.tar.xz). The CLI tests skip (no CLI carried).
# (Also the shard runner of split_tests.sh: GT archive, RDIR under $OUT, FILTER, TT seconds per shard; the defaults are
# the run recorded in tests/f/.)
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/${RDIR:-f}; mkdir -p $R /tmp/gt
tar xJf ${GT:-.carry/gt_main.tar.xz} -C /tmp/gt
B=/tmp/gt/gt/fp4gemm_gpu_tests
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpu.txt
t0=$SECONDS; N=${SHARDS:-4}
for i in $(seq 0 $((N - 1))); do
  GTEST_TOTAL_SHARDS=$N GTEST_SHARD_INDEX=$i timeout ${TT:-540} $B --gtest_brief=1 ${FILTER:+--gtest_filter="$FILTER"} \
    > $R/shard$i.txt 2>&1 &
done
wait
for i in $(seq 0 $((N - 1))); do
  echo "shard $i: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|tests? from .* ran' $R/shard$i.txt | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' $R/shard$i.txt | head -20
done
echo "[$((SECONDS - t0)) s]"
