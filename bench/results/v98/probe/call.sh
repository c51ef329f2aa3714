#!/usr/bin/env bash
# v98 (session 111): exp/drain-shared (`../../v97/drain_shared.patch`) on the GPU machine in two calls, since device
# time is short (v97's call2 in three):
#   PART=build  the patched tree (library, CLI, GPU tests: what the README's test command compiles) from scratch,
#               alone and timed (issue 51's build), then main's library + CLI (/tmp/b), per-unit compile times of
#               both; then, in what is left of the call, the GLU / dual / MoE-layer gtests on the patched build.
#   PART=ab     v97's call2 PART=ab (CLI layer A/B main / patch at the GLU-heavy cells, digests of the layer and
#               dual suites); then memcheck of the GLU epilogue's tests if time is left.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; A=$OUT/v98${PART:-build}; mkdir -p $A
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee $A/gpu.txt
nproc | sed 's/^/cores: /'
case ${PART:-build} in
build)
  if [ ! -f /tmp/bd/built ]; then
    rm -rf /tmp/dsrc && mkdir -p /tmp/dsrc
    tar cf - --exclude=./bench/results --exclude=./.carry --exclude=./build . | tar xf - -C /tmp/dsrc
    (cd /tmp/dsrc && patch -p1 < $OLDPWD/bench/results/v97/drain_shared.patch) > $A/patch.txt 2>&1 || { cat $A/patch.txt; exit 3; }
    s=$SECONDS
    cmake -S /tmp/dsrc -B /tmp/bd -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=ON -DFP4GEMM_BUILD_TOOLS=ON \
      > $A/cmake_d.txt 2>&1
    ninja -C /tmp/bd > $A/build_d.txt 2>&1; rc=$?
    echo "patched build (library, CLI, tests; cmake included) rc $rc in $((SECONDS - s)) s [$((SECONDS - t0)) s]"
    [ $rc = 0 ] && touch /tmp/bd/built || { tail -20 $A/build_d.txt; }
  fi
  if [ ! -f /tmp/b/built ]; then
    s=$SECONDS
    cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=OFF -DFP4GEMM_BUILD_TOOLS=ON \
      > $A/cmake_m.txt 2>&1
    ninja -C /tmp/b > $A/build_m.txt 2>&1; rc=$?
    echo "main build (library, CLI) rc $rc in $((SECONDS - s)) s [$((SECONDS - t0)) s]"
    [ $rc = 0 ] && touch /tmp/b/built || { tail -20 $A/build_m.txt; }
  fi
  for d in /tmp/b /tmp/bd; do
    echo "== $d: the twelve slowest units"
    awk 'NR > 1 {printf "%6.1f s %s\n", ($2 - $1) / 1000, $4}' $d/.ninja_log | sort -rn | head -12
  done | tee $A/units.txt
  left=$((585 - (SECONDS - t0)))
  if [ -f /tmp/bd/built ] && [ $left -gt 30 ]; then
    timeout $left /tmp/bd/tests/fp4gemm_gpu_tests \
      --gtest_filter="${GF:-GluDevice.*:MoeGlu*:Seeds/MoeGlu*:DualGemm*:Seeds/DualGemm*:MoeLayerPieces.*:All/MoeLayerCases.*}" > $A/gt.txt 2>&1
    echo "gtests rc $? [$((SECONDS - t0)) s]"
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" $A/gt.txt | head -14
  fi ;;
ab)
  PART=ab DIG=0 ROUNDS=${ROUNDS:-2} OUT=$A bash bench/results/v97/probe/call2.sh 2>&1 | tail -14
  # digests (v97's form, the layer suite cut to its general-path cells, where the GLU epilogue runs: T >= 256, T 512)
  declare -A CLI=([m]=/tmp/b/tools/fp4gemm [d]=/tmp/bd/tools/fp4gemm)
  GP=5,6,7,12,13,14,19,20,21,26,27,28,30,32,34,36
  for s in "layer bf16" "layer nvfp4" "dual -"; do
    set -- $s; args="--suite $1"; [ $1 = layer ] && args="$args --act $2 --weight-layout pieces --cases $GP"
    for v in m d; do
      FP4GEMM_DIGEST=1 timeout 150 ${CLI[$v]} bench $args --no-peers > $A/suite_$1_$2_$v.txt 2>&1
      echo "suite $1 $2 $v rc $? [$((SECONDS - t0)) s]"
      grep -i "digest" $A/suite_$1_$2_$v.txt | sed 's/  */ /g' > /tmp/d_$v
    done
    echo "digests $1 $2: $(wc -l < /tmp/d_m) / $(wc -l < /tmp/d_d) lines, differing: $(diff /tmp/d_m /tmp/d_d | grep -c '^<')"
  done | tee $A/digests.txt
  left=$((585 - (SECONDS - t0)))
  if [ $left -gt 40 ]; then
    timeout $left compute-sanitizer --tool memcheck --report-api-errors no /tmp/bd/tests/fp4gemm_gpu_tests \
      --gtest_filter="${MF:-GluDevice.*:MoeGluPiecesShapes.*}" > $A/memcheck.txt 2>&1
    echo "memcheck rc $? [$((SECONDS - t0)) s]"; tail -3 $A/memcheck.txt
  fi ;;
esac
gzip -f $A/*.txt 2>/dev/null; tar czf $OUT/v98${PART:-build}.tgz -C $OUT v98${PART:-build}; echo "done [$((SECONDS - t0)) s]"
