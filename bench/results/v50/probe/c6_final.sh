#!/usr/bin/env bash
# Call 6: the final build (routing 32-bit / 32 warps / batched, leaner combine, digest tooling): full C++
# GPU tier (4 shards) beside the Python layer/MoE/EP/lifetime/random files; memcheck + racecheck;
# ncu of routing + combine; layer suites A (399676a) / B (general path) / B default.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-./out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/.carry/pkg"
B=/work/main-build; [ -e "$B" ] || { mkdir -p /work && ln -s "$PWD/.carry/build" "$B"; }
BIN=.carry/build/tests/fp4gemm_gpu_tests
t0=$SECONDS; pids=()
for i in 0 1 2 3; do
  GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$i timeout 330 $BIN --gtest_brief=1 > /tmp/g$i.log 2>&1 & pids+=($!)
done
timeout 330 python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_moe_layer_gpu.py tests/python/test_moe_gpu.py \
  tests/python/test_lifetimes_gpu.py tests/python/test_ep_device_gpu.py tests/python/test_random_sequences.py > /tmp/py.log 2>&1 & py=$!
for p in "${pids[@]}"; do wait $p; echo "shard rc=$?"; done
echo "[gpu] $((SECONDS - t0)) s"; cat /tmp/g*.log > "$OUT/gpu_tests.log"
grep -E "tests ran|PASSED|FAILED|SKIPPED \]" "$OUT/gpu_tests.log"
wait $py; echo "python rc=$? $((SECONDS - t0)) s"; cp /tmp/py.log "$OUT/py_tests.log"; grep -E "^(FAILED|ERROR)|passed|failed" /tmp/py.log | tail -8
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $BIN --gtest_filter='AlignRouting.*:*MoeLayerCases.*/case0:MoeLayerGraph*:FusedSanitizer.*' > /tmp/mc.log 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|PASSED|FAILED" /tmp/mc.log | head -4
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 $BIN --gtest_filter='AlignRouting.*' > /tmp/rc.log 2>&1
echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY|PASSED|FAILED" /tmp/rc.log | head -4
cat /tmp/mc.log /tmp/rc.log > "$OUT/sanitizers.log"
echo "[sanitizers] $((SECONDS - t0)) s"
N=.carry/build/tools/fp4gemm; A=.carry/cliOld/fp4gemm
for s in "qwen3 T4096 --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens 4096 --act bf16" "qwen3 T1024 --experts 128 --hidden 2048 --inter 768 --topk 8 --tokens 1024 --act bf16" "gptoss T4096 --experts 128 --hidden 2880 --inter 2880 --topk 4 --tokens 4096 --act bf16 --activation swigluoai"; do
  set -- $s; tag="$1 $2"; shift 2
  for side in A B; do
    bin=$A; x=""; [ $side = B ] && bin=$N && x="--decode-tokens 0"
    echo "== $tag $side: $(timeout 60 ncu --clock-control none --print-summary per-kernel --metrics gpu__time_duration.sum -k regex:'align_routing|combine' $bin layer "$@" $x --warmup 1 --iters 2 2>&1 | grep -E '(align_routing|combine)_kernel|gpu__time' | sed 's/  */ /g' | sed -E 's/.*(align_routing_kernel|combine_kernel).*/\1/; s/gpu__time_duration.sum us//' | paste -sd' ')"
  done
done 2>&1 | tee "$OUT/ncu_routing.txt"
R=/tmp/ab; mkdir -p $R; export FP4GEMM_DIGEST=1
for act in bf16 nvfp4; do
  $A bench --suite layer --act $act --settle-ms 100 --json $R/layer_$act\_A1.json > $R/layer_$act\_A1.txt 2>&1
  $N bench --suite layer --act $act --settle-ms 100 --decode-tokens 0 --json $R/layer_$act\_B1.json > $R/layer_$act\_B1.txt 2>&1
  $N bench --suite layer --act $act --settle-ms 100 --json $R/default_$act\_B1.json > $R/default_$act\_B1.txt 2>&1
  echo "[layer $act] $((SECONDS - t0)) s"
done
python3 .carry/probe/ab_compare.py $R
tar czf "$OUT/layer_ab.tgz" -C $R .
echo "[done] $((SECONDS - t0)) s"
