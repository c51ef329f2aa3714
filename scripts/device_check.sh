#!/usr/bin/env bash
# One batched run on a GPU machine: build, GPU tier, compute-sanitizer, SASS checks, benchmark.
# Logs go to $OUT (or ./device-out). Usage: scripts/device_check.sh [build|test|sanitize|sass|bench]...
# Environment: GTEST_FILTER (test step), SAN_FILTER (sanitize step; default FusedSanitizer.*), BENCH_ARGS.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-device-out}; mkdir -p "$OUT"
BUILD=${BUILD:-build/device}
steps=("$@"); [ ${#steps[@]} -eq 0 ] && steps=(build test sanitize sass bench)
for step in "${steps[@]}"; do
  case "$step" in
    build)
      cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_PTXAS_VERBOSE=ON > "$OUT/configure.log" 2>&1 || { tail -20 "$OUT/configure.log"; exit 1; }
      ( time cmake --build "$BUILD" -j 16 ) > "$OUT/build.log" 2>&1 || { grep -E "error|Error" "$OUT/build.log" | head -30; exit 1; }
      grep -E "C75|spill|stack frame" "$OUT/build.log" | sort | uniq -c | sort -rn | head -8
      tail -3 "$OUT/build.log" ;;
    test)
      timeout ${TEST_TIMEOUT:-900} "$BUILD/tests/fp4gemm_gpu_tests" --gtest_brief=1 ${GTEST_FILTER:+--gtest_filter=$GTEST_FILTER} > "$OUT/gpu_tests.log" 2>&1
      echo "gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran|FAILED TEST" "$OUT/gpu_tests.log" | head -30 ;;
    sanitize)
      for tool in memcheck racecheck; do
        filter=${SAN_FILTER:-FusedSanitizer.*}
        # racecheck does not survive the test that runs one plan from two host threads at once
        if [ "$tool" = racecheck ]; then
          case "$filter" in *-*) filter="$filter:*ConcurrentThreads*" ;; *) filter="$filter-*ConcurrentThreads*" ;; esac
        fi
        compute-sanitizer --tool $tool --error-exitcode 9 "$BUILD/tests/fp4gemm_gpu_tests" --gtest_filter="$filter" > "$OUT/sanitizer_$tool.log" 2>&1
        echo "sanitizer $tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/sanitizer_$tool.log" | head -3
      done ;;
    sass)
      for f in "$BUILD"/CMakeFiles/fp4gemm.dir/src/kernels/sm90/fused_*.cu.o; do
        cuobjdump -sass "$f" > "$OUT/sass_$(basename "$f" .cu.o).txt" 2>&1
        sass="$OUT/sass_$(basename "$f" .cu.o).txt"
        # A wait-for-all after most HGMMAs means ptxas serialised the wgmma pipeline.
        echo "$(basename "$f"): HGMMA=$(grep -c HGMMA "$sass") wait-all=$(grep -c 'DEPBAR.LE gsb0, 0x0' "$sass") LDL/STL=$(grep -cE '\b(LDL|STL)\b' "$sass")"
      done ;;
    bench)
      "$BUILD/tools/fp4gemm" bench --suite all --json "$OUT/bench.json" ${BENCH_ARGS:-} 2> "$OUT/bench.err" | tee "$OUT/bench.txt"
      tail -3 "$OUT/bench.err" ;;
  esac
done
