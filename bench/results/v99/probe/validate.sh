#!/usr/bin/env bash
# v99 (session 112): main as checked out (the routing's grid bounds changed) built on the machine with the tests
# (CMake, /tmp/b), then the routing and MoE-layer gtests, memcheck / racecheck of the routing tests, and the CLI layer
# at issue 52's prefill cells (W4A16 pieces, checkpoint scales) for the before / after against v99's split probe
# run (main a7ad5bf, same card kind). Logs under $OUT/val.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; A=$OUT/val; mkdir -p $A; B=/tmp/b
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader | tee $A/gpu.txt
if [ ! -f $B/built ]; then
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=ON -DFP4GEMM_BUILD_TOOLS=ON > $A/cmake.txt 2>&1
  ninja -C $B > $A/build.txt 2>&1; rc=$?; echo "build rc $rc [$((SECONDS - t0)) s]"
  [ $rc = 0 ] && touch $B/built || { tail -20 $A/build.txt; exit 3; }
fi
timeout 200 $B/tests/fp4gemm_gpu_tests --gtest_filter="AlignRouting*:MoeRouting*:MoeLayer*:MoeBadRouting*:MoeGraph*" \
  > $A/gt.txt 2>&1; echo "gtests rc $? [$((SECONDS - t0)) s]"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" $A/gt.txt | head -14
for tool in memcheck racecheck; do
  timeout 90 compute-sanitizer --tool $tool --report-api-errors no $B/tests/fp4gemm_gpu_tests \
    --gtest_filter="AlignRoutingRows.*" > $A/$tool.txt 2>&1; echo "$tool rc $? [$((SECONDS - t0)) s]"; tail -2 $A/$tool.txt
done
C=18,16,27,25,13,22  # Qwen3 T 512 / 4096, gpt-oss T 512 / 4096, Qwen3 T 128, gpt-oss T 128
for r in 1 2; do
  timeout 100 $B/tools/fp4gemm bench --suite layer --act bf16 --weight-layout pieces --values checkpoint --cases $C \
    --iters 100 --json $A/layer_r$r.json > $A/layer_r$r.txt 2>&1; echo "cli layer round $r rc $? [$((SECONDS - t0)) s]"
done
python3 - "$A" <<'PY'
import json, sys, glob
rows = {}
for f in sorted(glob.glob(sys.argv[1] + "/layer_r*.json")):
    for c in json.load(open(f))["cases"]:
        rows.setdefault((c["model"], c["tokens"]), []).append(c["time_us"]["median"])
for (m, t), v in sorted(rows.items()):
    print(f"  {m:16s} T {t:5d}: " + " / ".join(f"{x:.1f}" for x in v))
PY
gzip -f $A/*.txt; tar czf $OUT/val.tgz -C $OUT val; echo "done [$((SECONDS - t0)) s]"
