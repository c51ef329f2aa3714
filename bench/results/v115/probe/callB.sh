#!/usr/bin/env bash
# v115 call B (whichever GPU comes). PHASE=all (default): main as checked out built there in the background (library +
# CLI, + the Python extension on an H200 so that table.sh can use /tmp/b next; the CLI packed under $OUT as
# nw_cli.tar.xz for later calls) while exp/split-wider2's carried C++ GPU tier runs (3 shards); then v106's ab3.sh
# layer A/B (W4A16 pieces, checkpoint scales, digests), n = main, s = the branch, [p = .carry/p2_cli.tar.xz if
# carried], ROUNDS (3); then memcheck if the time allows. PHASE=san: the branch's memcheck / racecheck / synccheck
# (v114's callT.sh filters). PHASE=ab: only the A/B. Carry .carry/sw_build.tar.xz (the branch's CLI + gpu tests,
# built in /work/bs) with trim.sh out.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,power.limit --format=csv,noheader
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
BD=${BD:-/work/bs}; PH=${PHASE:-all}
mkdir -p .carry/build && xz -dc .carry/sw_build.tar.xz | tar xf - -C .carry/build || { echo "unpack failed"; exit 3; }
san() {
  F='*PlanOrdering*:*MoeLayerCases.*/case0:*MoeLayerCases.*/case4:*MoeLayerCases.*/case9:MoeLayerGraph*:MoeLayerPrequantised*:MoeGluShapes.ModelShapedTilesAndBothHeights:MoeGluShapes.StreamKSplitTiles:MoeGluShapes.SplitLastRound*:MoeStreamK.*:MoePieces*:MoeLayerPieces*'
  timeout ${ST:-200} compute-sanitizer --tool memcheck --error-exitcode 9 .carry/build/tests/fp4gemm_gpu_tests \
    --gtest_filter="$F" > $OUT/sanitizer_memcheck.log 2>&1; echo "memcheck rc $? [$((SECONDS - t0)) s]"
  grep -E "ERROR SUMMARY|Invalid|tests ran|PASSED|FAILED" $OUT/sanitizer_memcheck.log | head -8
  [ "$1" = memcheck ] && return
  for tool in racecheck synccheck; do
    timeout ${RT:-60} compute-sanitizer --tool $tool --error-exitcode 9 .carry/build/tests/fp4gemm_gpu_tests \
      --gtest_filter='MoeGluShapes.StreamKSplitTiles:MoeStreamK.WideClassesSplitLastRound:*MoeLayerCases.*/case0' > $OUT/sanitizer_$tool.log 2>&1
    echo "$tool rc $? [$((SECONDS - t0)) s]"; grep -E "ERROR SUMMARY|HAZARD|tests ran|PASSED|FAILED" $OUT/sanitizer_$tool.log | head -6
  done
}
if [ $PH = all ]; then
  py=OFF; [[ $name == *H200* ]] && py=ON
  if [ ! -f /tmp/b/built ]; then
    ( cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=OFF -DFP4GEMM_BUILD_TOOLS=ON \
        -DFP4GEMM_BUILD_PYTHON=$py > $OUT/cmake_main.txt 2>&1 && ninja -C /tmp/b > $OUT/build_main.txt 2>&1 \
        && touch /tmp/b/built && tar cf - -C /tmp/b tools/fp4gemm | xz -6 -T4 > $OUT/nw_cli.tar.xz
      echo "main build (python $py) rc $? [$((SECONDS - t0)) s]" ) &
    bpid=$!
  fi
  FP4GEMM_BUILD_DIR=$BD OUT=$OUT bash scripts/device_carried.sh gpu; echo "gpu tier rc $? [$((SECONDS - t0)) s]"
  [ -n "${bpid:-}" ] && wait $bpid
fi
if [ $PH = all -o $PH = ab ]; then
  W=$OUT/w; mkdir -p $W/ab /tmp/ab/n /tmp/ab/s
  [ -x /tmp/b/tools/fp4gemm ] || { mkdir -p /tmp/b && xz -dc .carry/nw_cli.tar.xz | tar xf - -C /tmp/b; } || { echo "no main CLI"; exit 3; }
  ln -sf /tmp/b/tools/fp4gemm /tmp/ab/n/fp4gemm; ln -sf $PWD/.carry/build/tools/fp4gemm /tmp/ab/s/fp4gemm; clis="n s"
  if [ -f .carry/p2_cli.tar.xz ]; then
    mkdir -p /tmp/xp /tmp/ab/p && xz -dc .carry/p2_cli.tar.xz | tar xf - -C /tmp/xp && ln -sf /tmp/xp/tools/fp4gemm /tmp/ab/p/fp4gemm && clis="n s p"
  fi
  ROUNDS=${ROUNDS:-3} bash bench/results/v106/probe/ab3.sh ${CASES:-8,9,10,11,12,13,14,15,16,17,18,19,20,21,31,32,33,34} $W/ab $clis | tail -24
  echo "ab done [$((SECONDS - t0)) s]"
  nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader
  tar czf $OUT/b_ab.tgz -C $OUT w && rm -rf $W
fi
[ $PH = all ] && [ $((SECONDS - t0)) -lt ${SANB:-420} ] && san memcheck
[ $PH = san ] && san all
(cd $OUT && ls *.log *.txt > /dev/null 2>&1 && tar czf b_${PH}_logs.tgz *.log *.txt && rm -f *.log *.txt)
echo "all done [$((SECONDS - t0)) s]"
