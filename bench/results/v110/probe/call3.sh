#!/usr/bin/env bash
# v110 call 3: memcheck on the two GLU shape tests that failed in call 2, with device backtraces, on the carried
# branch test binary (.carry/pp_build.tar.xz; its build folder /work/pb is linked to the unpacked copy).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p .carry/build && xz -dc .carry/pp_build.tar.xz | tar xf - -C .carry/build; mkdir -p /work && ln -sfn $PWD/.carry/build /work/pb
timeout 200 compute-sanitizer --tool memcheck --show-backtrace device .carry/build/tests/fp4gemm_gpu_tests \
  --gtest_filter='MoeGluShapes.SplitLastRound:MoeGluShapes.ModelShapedTilesAndBothHeights' > $OUT/mc.log 2>&1
grep -v "^\[ " $OUT/mc.log | head -60
