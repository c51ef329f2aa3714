#!/usr/bin/env bash
# v106 (one H200). PART=build: main built in /tmp/b (v95's table.sh, PHASE=build: library, CLI, Python extension),
# then exp/rot-decode (main + probe/rot_decode.patch) in /tmp/b2 with the tests and the Python extension; then, while
# the call has time, A/B rounds of the layer suite (bench/results/v102/probe/ab_layer.sh: m = main's CLI, r = the
# branch's, alternating, W4A16 pieces, checkpoint scales, digests). PART=table: issue 52's table on main (table.sh's
# rounds, /tmp/b kept from the build call), more A/B rounds, the branch's GPU tests and compute-sanitizer. Carry
# .carry/peers.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
P=$PWD/bench/results/v106/probe; W=$OUT/w; mkdir -p $W
CASES=${CASES:-8,9,10,11,12,13,14,15,16,17,18,19,20,21,31,32,33,34}
ab() {  # rounds of the A/B into $W/ab$1
  mkdir -p /tmp/ab/m /tmp/ab/r $W/ab$1; ln -sf /tmp/b/tools/fp4gemm /tmp/ab/m/fp4gemm; ln -sf /tmp/b2/tools/fp4gemm /tmp/ab/r/fp4gemm
  ROUNDS=${2:-2} bash bench/results/v102/probe/ab_layer.sh m r $CASES $W/ab$1 | tail -25
  echo "ab$1 done [$((SECONDS - t0)) s]"
}
if [ "${PART:-build}" = build ]; then
  PHASE=build NAME=c1_build_main bash bench/results/v95/probe/table.sh
  if [ ! -f /tmp/b2/built ]; then
    rm -rf /tmp/src2 && mkdir /tmp/src2 && tar cf - --exclude=./.carry . | tar xf - -C /tmp/src2
    (cd /tmp/src2 && patch -p1 -s < $P/rot_decode.patch) || { echo "patch failed"; exit 3; }
    cmake -S /tmp/src2 -B /tmp/b2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=ON -DFP4GEMM_BUILD_TOOLS=ON \
      -DFP4GEMM_BUILD_PYTHON=ON > $W/cmake2.txt 2>&1 || { echo "cmake 2 failed"; tail -20 $W/cmake2.txt; }
    ninja -C /tmp/b2 > $W/build2.txt 2>&1; rc=$?; echo "branch build rc $rc [$((SECONDS - t0)) s]"
    [ $rc = 0 ] && touch /tmp/b2/built || tail -30 $W/build2.txt
  fi
  [ -f /tmp/b2/built ] && [ $((SECONDS - t0)) -lt ${ABMAX:-440} ] && ab 1 ${R1:-2}
else
  ROUND_REPS="100 100" HM=0 SMOKE=0 NAME=c2_table bash bench/results/v95/probe/table.sh
  [ $((SECONDS - t0)) -lt 330 ] && ab 2 ${R2:-1}
  # the branch's GPU tests on what the change touches (pieces, the layer, the decode path) and compute-sanitizer
  (cd /tmp/b2 && timeout ${TT:-150} ./tests/fp4gemm_gpu_tests --gtest_brief=1 \
     --gtest_filter='*Pieces*:MoeLayer*' > $W/gpu_tests.txt 2>&1; echo "gpu tests rc $? [$((SECONDS - t0)) s]"; tail -5 $W/gpu_tests.txt)
  (cd /tmp/b2 && timeout ${ST:-90} compute-sanitizer --tool memcheck ./tests/fp4gemm_gpu_tests --gtest_brief=1 \
     --gtest_filter='MoePieces.*:MoeLayerPieces.*:MoeLayerDecode.*' > $W/memcheck.txt 2>&1; echo "memcheck rc $? [$((SECONDS - t0)) s]"; tail -4 $W/memcheck.txt)
fi
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
tar czf $OUT/${NAME:-c1}.tgz -C $OUT w && rm -rf $W; echo "all done [$((SECONDS - t0)) s]"
