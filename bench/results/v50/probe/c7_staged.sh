#!/usr/bin/env bash
# Call 7: gather staged in shared memory for large routings: routing/MoE/layer/EP GPU tests, sanitizers
# on the routing tests, ncu of the routing kernel, the layer suites (general path).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-./out}; mkdir -p "$OUT"
B=/work/main-build; [ -e "$B" ] || { mkdir -p /work && ln -s "$PWD/.carry/build" "$B"; }
BIN=.carry/build/tests/fp4gemm_gpu_tests; N=.carry/build/tools/fp4gemm
t0=$SECONDS; pids=()
for i in 0 1 2 3; do
  GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout 120 $BIN --gtest_brief=1 --gtest_filter='AlignRouting.*:*Moe*:*Ep*:*Combine*' > /tmp/g$i.log 2>&1 & pids+=($!)
done
for p in "${pids[@]}"; do wait $p; echo "shard rc=$?"; done
cat /tmp/g*.log > "$OUT/gpu_tests.log"; echo "[gpu] $((SECONDS - t0)) s"; grep -E "tests ran|PASSED|FAILED|SKIPPED \]" "$OUT/gpu_tests.log"
timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN --gtest_filter='AlignRouting.*' > /tmp/mc.log 2>&1; echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" /tmp/mc.log | head -3
timeout 40 compute-sanitizer --tool racecheck --error-exitcode 9 $BIN --gtest_filter='AlignRouting.*' > /tmp/rc.log 2>&1; echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" /tmp/rc.log | head -3
cat /tmp/mc.log /tmp/rc.log > "$OUT/sanitizers.log"; echo "[san] $((SECONDS - t0)) s"
for s in "qwen3T4096 --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens 4096" "qwen3T1024 --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens 1024" "gptossT4096 --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens 4096 --activation swigluoai"; do
  set -- $s; tag=$1; shift
  echo "== $tag: $(timeout 40 ncu --clock-control none --print-summary per-kernel --metrics gpu__time_duration.sum -k regex:'align_routing' $N layer "$@" --act bf16 --decode-tokens 0 --warmup 1 --iters 2 2>&1 | grep -E 'gpu__time' | sed 's/  */ /g')"
done
export FP4GEMM_DIGEST=1
for act in bf16 nvfp4; do timeout 40 $N bench --suite layer --act $act --settle-ms 100 --decode-tokens 0 --json "$OUT/layer_$act.json" > /tmp/l$act.txt 2>&1; echo "[layer $act] rc=$? $((SECONDS - t0)) s"; grep -E "^[0-9]+ +qwen3.*(1024|4096)|^[0-9]+ +gpt-oss.*4096" /tmp/l$act.txt | cut -c1-60; done
cat /tmp/lbf16.txt /tmp/lnvfp4.txt | grep "^digest" > "$OUT/layer_digests.txt"
