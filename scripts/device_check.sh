#!/usr/bin/env bash
# One batched run on a GPU machine: build, GPU tier, compute-sanitizer, SASS checks, benchmark.
# Logs go to $OUT (or ./device-out). Usage: scripts/device_check.sh [build|test|sanitize|sass|bench]...
# Environment: GTEST_FILTER (test step), SAN_FILTER (sanitize step; default FusedSanitizer.*), BENCH_ARGS.
# Step `buildtime` (not in the default list): a build from scratch of everything the README's two
# commands need (library, CLI, tests, then the Python package linking that library), timed, with
# the per-unit compile times from ninja's log (issue 51's "a build in minutes").
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
    buildtime)
      bt=build/buildtime; rm -rf "$bt" build/py-buildtime
      start=$(date +%s)
      cmake -S . -B "$bt" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=ON -DFP4GEMM_BUILD_TOOLS=ON > "$OUT/buildtime_configure.log" 2>&1
      ( time cmake --build "$bt" -j "$(nproc)" ) > "$OUT/buildtime_cmake.log" 2>&1 || { tail -20 "$OUT/buildtime_cmake.log"; exit 1; }
      mid=$(date +%s)
      ( time python3 -m pip install --no-build-isolation --no-deps --target build/py-buildtime/site . \
          -C "cmake.define.FP4GEMM_PREBUILT_DIR=$(cd "$bt" && pwd)" -C "build-dir=build/py-buildtime/{wheel_tag}" ) \
          > "$OUT/buildtime_pip.log" 2>&1 || tail -20 "$OUT/buildtime_pip.log"
      end=$(date +%s)
      # ninja log: start and end ms of each output; slowest units first
      awk -F'\t' 'NR > 1 { printf "%8.1f s  %s\n", ($2 - $1) / 1000, $4 }' "$bt/.ninja_log" | sort -rn > "$OUT/buildtime_units.txt"
      echo "buildtime on $(nproc) cores: CMake build $((mid - start)) s, pip install (prebuilt library) $((end - mid)) s, total $((end - start)) s"
      head -8 "$OUT/buildtime_units.txt" ;;
    bench)
      "$BUILD/tools/fp4gemm" bench --suite all --json "$OUT/bench.json" ${BENCH_ARGS:-} 2> "$OUT/bench.err" | tee "$OUT/bench.txt"
      tail -3 "$OUT/bench.err" ;;
  esac
done
