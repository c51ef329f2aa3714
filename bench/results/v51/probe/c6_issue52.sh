#!/usr/bin/env bash
# v51 call 6 (nvidia-h200): main (eeb8aa1) + routing staged in shared memory (v50 patch, adapted to the
# routed-only stores) + decode_w4a4_stage_quant.patch. pkgM: 1fe1d1f (decode kernels as main).
# Built on the CPU machine, laid out by scripts/carry_build.sh; carry .carry/build .carry/pkg .carry/pkgM.
# About 300 s.
#   1. the GPU tests that run the changed kernels (routing, MoE, layer incl. the decode path, EP) in 4 shards,
#      beside the Python layer / MoE / lifetime / EP / random files;
#   2. memcheck on the routing and decode tests, racecheck on the routing tests;
#   3. ncu of the routing kernel at 8 k / 16 k / 32 k ids (v50: 18.1 / 31.5 / 61.7 us; predicted ~3-10);
#   4. decode W4A4 + W4A16 T 1-4, main against the branch (v50 main: gpt-oss nvfp4 T 1 62.4 us; predicted -2 to -3);
#   5. the layer suites (general path) with digests.
# Exactness: the decode A/B prints a digest per case (main's and the branch's must agree), and the layer digests
# must equal those in bench/results/v50/layer_final/layer_{bf16,nvfp4}_B1.txt (same seeds, general path).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=${OUT:-./out}/r; mkdir -p "$R"; OUT=$R
export PYTHONUNBUFFERED=1
B=/work/main-build; [ -e "$B" ] || { mkdir -p /work && ln -s "$PWD/.carry/build" "$B"; }
BIN=.carry/build/tests/fp4gemm_gpu_tests; N=.carry/build/tools/fp4gemm
t0=$SECONDS; pids=()
for i in 0 1 2 3; do
  GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout 200 $BIN --gtest_brief=1 --gtest_filter='*AlignRouting*:*Moe*:*Ep*:*Combine*' > /tmp/g$i.log 2>&1 & pids+=($!)
done
PYTHONPATH=$PWD/.carry/pkg timeout 220 python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_moe_layer_gpu.py \
  tests/python/test_moe_gpu.py tests/python/test_lifetimes_gpu.py tests/python/test_ep_device_gpu.py tests/python/test_random_sequences.py > /tmp/py.log 2>&1 & py=$!
for p in "${pids[@]}"; do wait $p; echo "shard rc=$?"; done
cat /tmp/g*.log > "$OUT/gpu_tests.log"; echo "[gpu] $((SECONDS - t0)) s"; grep -E "tests ran|PASSED|FAILED|SKIPPED \]" "$OUT/gpu_tests.log"
wait $py; echo "python rc=$?"; cp /tmp/py.log "$OUT/py_tests.log"; grep -E "^(FAILED|ERROR)|passed|failed" /tmp/py.log | tail -5
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN --gtest_filter='AlignRouting.*:MoeLayerDecode*' > /tmp/mc.log 2>&1; echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" /tmp/mc.log | head -3
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 $BIN --gtest_filter='AlignRouting.*' > /tmp/rc.log 2>&1; echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" /tmp/rc.log | head -3
cat /tmp/mc.log /tmp/rc.log > "$OUT/sanitizers.log"; echo "[san] $((SECONDS - t0)) s"
for s in "qwen3T1024 --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens 1024" "gptossT4096 --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens 4096 --activation swigluoai" "qwen3T4096 --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens 4096"; do
  set -- $s; tag=$1; shift
  echo "== $tag: $(timeout 40 ncu --clock-control none --print-summary per-kernel --metrics gpu__time_duration.sum -k regex:'align_routing|combine' $N layer "$@" --act bf16 --decode-tokens 0 --warmup 1 --iters 2 2>&1 | grep -E '(align_routing|combine)_kernel|gpu__time' | sed 's/  */ /g' | sed -E 's/.*(align_routing_kernel|combine_kernel).*/\1/; s/gpu__time_duration.sum us//' | paste -sd' ')"
done 2>&1 | tee "$OUT/ncu_routing.txt"
for rnd in 1 2; do
  PYTHONPATH=$PWD/.carry/pkgM ACTS=nvfp4,bf16 TOKENS=1,2,3,4 timeout 60 python3 bench/results/v50/probe/decode_ab.py main 2>&1 | grep -v Warning
  PYTHONPATH=$PWD/.carry/pkg ACTS=nvfp4,bf16 TOKENS=1,2,3,4 timeout 60 python3 bench/results/v50/probe/decode_ab.py branch 2>&1 | grep -v Warning
done 2>&1 | tee "$OUT/decode_ab.txt"
echo "[decode] $((SECONDS - t0)) s"
export FP4GEMM_DIGEST=1
for act in bf16 nvfp4; do
  timeout 60 $N bench --suite layer --act $act --settle-ms 100 --decode-tokens 0 --json "$OUT/layer_${act}_general.json" > /tmp/l$act.txt 2>&1
  grep "^digest" /tmp/l$act.txt > "$OUT/layer_${act}_digests.txt"
done
echo "[layer] $((SECONDS - t0)) s"
echo "[done] $((SECONDS - t0)) s"
tar czf ${OUT%/r}/r.tgz -C ${OUT%/r} r && rm -rf $R
