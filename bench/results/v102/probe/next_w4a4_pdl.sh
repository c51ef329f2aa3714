#!/usr/bin/env bash
# Prepared in session 115 (v102), not run: exp/w4a4-pdl (`../w4a4_pdl.patch` against main 593b15b) -- the expert
# layer's W4A4 quantisers as programmatic dependents: the token quantiser lets the pre-pass start at once, runs beside
# the routing (it reads only the caller's tokens) and waits for the routing at its end; the intermediate's quantiser
# waits for GEMM1 first. (The carried CLIs were built before 593b15b's shared launch configuration, which changes no
# launch: main's at 1537b0a, the branch at caec079.) Two calls on one warm machine, each carrying one CPU-built CLI (the carry fits one):
#   PART=main  (carry .carry/pg_main.tar.xz: main's CLI)    -- unpacks it into /tmp/ab/main
#   PART=ab    (carry .carry/pg_w4.tar.xz: the branch's CLI) -- unpacks it, then the A/B: the layer suite, W4A4 NVFP4
#              on pieces, main / branch alternating, 2 rounds, digests compared (ab_layer.sh's table, --act nvfp4)
# then, on the branch checked out, `PART=tests` builds its tests there and runs the quantiser / layer / graph tests
# and memcheck / racecheck / synccheck of the W4A4 graph replays (MoeLayerGraph.GeneralPath* covers W4A4 NVFP4).
# Prediction: W4A4 cells on the general path (T >= 128 at Qwen3, >= 64 at gpt-oss) -2..-5 µs (the quantiser
# overlapped with the routing, two launch gaps fewer); W4A16 and the decode path unchanged.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
R=$OUT/w4; mkdir -p $R /tmp/ab
case "${PART:-ab}" in
  main) tar xJf .carry/pg_main.tar.xz -C /tmp/ab && ls /tmp/ab ;;
  ab)
    tar xJf .carry/pg_w4.tar.xz -C /tmp/ab && ls /tmp/ab
    C=${CASES:-11,12,32,13,14,19,34,20,21,9,15}
    ACT=nvfp4 bash bench/results/v102/probe/ab_layer.sh main w4 $C $R
    tar czf $OUT/w4.tgz -C $OUT w4 ;;
  tests)
    B=/tmp/b4
    cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=ON -DFP4GEMM_BUILD_TOOLS=OFF \
      -DFP4GEMM_BUILD_PYTHON=OFF > $R/cmake.txt 2>&1 && ninja -C $B tests/fp4gemm_gpu_tests > $R/build.txt 2>&1
    echo "build rc $?"
    timeout 300 $B/tests/fp4gemm_gpu_tests --gtest_brief=1 \
      --gtest_filter='*Quantiz*:MoeLayer*:MoeGraph*:AlignRoutingRows*' > $R/gtests.txt 2>&1
    echo "gtests rc $?"; grep -E "PASSED|FAILED" $R/gtests.txt | head
    for tool in memcheck racecheck synccheck; do
      timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $B/tests/fp4gemm_gpu_tests \
        --gtest_filter='MoeLayerGraph.GeneralPath*:MoeLayerGraph.ReplaysWithANewRoutingEachTime' > $R/$tool.txt 2>&1
      echo "$tool rc $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $R/$tool.txt
    done
    tar czf $OUT/w4.tgz -C $OUT w4 ;;
esac
