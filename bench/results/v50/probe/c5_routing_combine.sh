#!/usr/bin/env bash
# Call 5: the batched, wider routing kernel and the leaner combine (main + working tree): the GPU tests
# that run them (C++ in 3 shards, Python layer/MoE/EP/lifetime files), memcheck + racecheck on the
# routing tests, then the layer suites A (399676a) / B (this build, general path) / B default.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-./out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/.carry/pkg"
B=/work/main-build; [ -e "$B" ] || { mkdir -p /work && ln -s "$PWD/.carry/build" "$B"; }
BIN=.carry/build/tests/fp4gemm_gpu_tests
F='*Moe*:*Routing*:*Combine*:*Ep*:*Layer*'
t0=$SECONDS; pids=()
for i in 0 1 2; do
  GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=$i timeout 300 $BIN --gtest_brief=1 --gtest_filter="$F" > /tmp/g$i.log 2>&1 & pids+=($!)
done
timeout 330 python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_moe_layer_gpu.py tests/python/test_moe_gpu.py \
  tests/python/test_lifetimes_gpu.py tests/python/test_ep_device_gpu.py tests/python/test_random_sequences.py > /tmp/py.log 2>&1 & py=$!
for p in "${pids[@]}"; do wait $p; echo "shard rc=$?"; done
echo "[gpu] $((SECONDS - t0)) s"; cat /tmp/g*.log > "$OUT/gpu_tests.log"
grep -E "tests ran|PASSED|FAILED|SKIPPED \]" "$OUT/gpu_tests.log"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN --gtest_filter='AlignRouting.*:*MoeLayerCases.*/case0:MoeLayerGraph*' > /tmp/mc.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" /tmp/mc.log | head -4
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 $BIN --gtest_filter='AlignRouting.*' > /tmp/rc.log 2>&1
echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" /tmp/rc.log | head -4
cat /tmp/mc.log /tmp/rc.log > "$OUT/sanitizers.log"
wait $py; echo "python rc=$? $((SECONDS - t0)) s"; cp /tmp/py.log "$OUT/py_tests.log"; grep -E "^(FAILED|ERROR)|passed|failed" /tmp/py.log | tail -8
R=/tmp/ab; mkdir -p $R; export FP4GEMM_DIGEST=1
A=.carry/cliOld/fp4gemm; N=.carry/build/tools/fp4gemm
for act in bf16 nvfp4; do
  $A bench --suite layer --act $act --settle-ms 100 --json $R/layer_$act\_A1.json > $R/layer_$act\_A1.txt 2>&1
  $N bench --suite layer --act $act --settle-ms 100 --decode-tokens 0 --json $R/layer_$act\_B1.json > $R/layer_$act\_B1.txt 2>&1
  $N bench --suite layer --act $act --settle-ms 100 --json $R/layerdef_$act\_B1.json > $R/layerdef_$act\_B1.txt 2>&1
  echo "[layer $act] $((SECONDS - t0)) s"
done
python3 .carry/probe/ab_compare.py $R
timeout 60 ncu --clock-control none --print-summary per-kernel --metrics gpu__time_duration.sum -k regex:"align_routing|combine" $N layer --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens 4096 --act bf16 --decode-tokens 0 --warmup 2 --iters 3 2>&1 | grep -E "align_routing|combine|gpu__time" | sed 's/  */ /g' | cut -c1-120
tar czf "$OUT/layer_ab.tgz" -C $R .
echo "[done] $((SECONDS - t0)) s"
