#!/usr/bin/env bash
# Prepared in session 110 (no device then). exp/drain-shared (`../drain_shared.patch`: the GLU epilogue's drain out of
# line) built on the GPU machine beside main, then checked and timed against main in the same call(s):
#   PART=build  main's library + CLI (v95's table.sh, /tmp/b, unless call1 built it) and the patched tree's library,
#               CLI and GPU tests (/tmp/dsrc -> /tmp/bd), per-unit compile times of both (the point of the change);
#   PART=tests  the GLU / dual / MoE-layer gtests on the patched build, memcheck of the GLU epilogue's tests;
#   PART=ab     CLI `layer` A/B (W4A16 pieces, checkpoint scales, builds alternating, ROUNDS rounds of 100) at the cells
#               the GLU epilogue weighs in, then the digests of the layer suites (bf16, nvfp4 T >= 256) and the dual
#               suite, main against the patch (bytes must be identical: the same code, called instead of inlined).
# Logs under $OUT/d<part>. Each part fits one call on a warm machine (the builds stay in /tmp while it is held).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
t0=$SECONDS; A=$OUT/d${PART:-build}; mkdir -p $A
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv,noheader | tee $A/gpu.txt
case ${PART:-build} in
build)
  [ -f /tmp/b/built ] || PHASE=build NAME=d_mainbuild bash bench/results/v95/probe/table.sh 2>&1 | tail -12
  if [ ! -f /tmp/bd/built ]; then
    rm -rf /tmp/dsrc && mkdir -p /tmp/dsrc
    tar cf - --exclude=./bench/results --exclude=./.carry --exclude=./build . | tar xf - -C /tmp/dsrc
    (cd /tmp/dsrc && patch -p1 < $OLDPWD/bench/results/v97/drain_shared.patch) > $A/patch.txt 2>&1 || { cat $A/patch.txt; exit 3; }
    cmake -S /tmp/dsrc -B /tmp/bd -G Ninja -DCMAKE_BUILD_TYPE=Release -DFP4GEMM_BUILD_TESTS=ON -DFP4GEMM_BUILD_TOOLS=ON \
      > $A/cmake.txt 2>&1
    s=$SECONDS; ninja -C /tmp/bd > $A/build.txt 2>&1; rc=$?
    echo "patched build rc $rc in $((SECONDS - s)) s [$((SECONDS - t0)) s]"; [ $rc = 0 ] && touch /tmp/bd/built || tail -20 $A/build.txt
  fi
  for d in /tmp/b /tmp/bd; do
    echo "== $d: the ten slowest units"; awk 'NR > 1 {printf "%6.1f s %s\n", ($2 - $1) / 1000, $4}' $d/.ninja_log | sort -rn | head -10
  done | tee $A/units.txt ;;
tests)
  gsum() { grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|tests from .* ran" "$1" | head -14; }
  timeout ${GTT:-300} /tmp/bd/tests/fp4gemm_gpu_tests \
    --gtest_filter="${GF:-GluDevice.*:MoeGlu*:Seeds/MoeGlu*:DualGemm*:Seeds/DualGemm*:MoeLayerPieces.*:All/MoeLayerCases.*}" > $A/gt.txt 2>&1
  echo "gtests rc $? [$((SECONDS - t0)) s]"; gsum $A/gt.txt
  timeout ${MCT:-200} compute-sanitizer --tool memcheck --report-api-errors no /tmp/bd/tests/fp4gemm_gpu_tests \
    --gtest_filter="${MF:-GluDevice.*:MoeGluPiecesShapes.*}" > $A/memcheck.txt 2>&1
  echo "memcheck rc $? [$((SECONDS - t0)) s]"; tail -3 $A/memcheck.txt ;;
ab)
  shape() { case $1 in gptoss) echo "--experts 128 --hidden 2880 --inter 2880 --topk 4 --activation swigluoai";;
                       qwen3) echo "--experts 128 --hidden 2048 --inter 768 --topk 8 --activation silu";; esac; }
  declare -A CLI=([m]=/tmp/b/tools/fp4gemm [d]=/tmp/bd/tools/fp4gemm)
  for r in $(seq 1 ${ROUNDS:-2}); do
    IFS=';' read -ra CL <<< "${CELLS:-gptoss 512;gptoss 1024;gptoss 4096;qwen3 512;qwen3 4096}"
    for cs in "${CL[@]}"; do
      set -- $cs; line="r$r $1 T$2:"
      for v in m d; do
        f=$A/${v}_$1_t$2_r$r.txt
        timeout 90 ${CLI[$v]} layer $(shape $1) --tokens $2 --act bf16 --weight-layout pieces --values checkpoint \
          --iters 100 --warmup 10 > $f 2>&1
        line="$line $v $(grep -oE '^time: [0-9.]+' $f | cut -d' ' -f2)"
      done
      echo "$line [$((SECONDS - t0)) s]"
    done
  done | tee $A/ab.txt
  if [ "${DIG:-1}" = 1 ]; then
    for s in "layer bf16" "layer nvfp4" "dual -"; do
      set -- $s; args="--suite $1"; [ $1 = layer ] && args="$args --act $2 --weight-layout pieces"
      [ "$2" = nvfp4 ] && args="$args --cases 5,6,7,12,13,14,19,20,21,26,27,28"
      for v in m d; do
        FP4GEMM_DIGEST=1 timeout 200 ${CLI[$v]} bench $args --no-peers > $A/suite_$1_$2_$v.txt 2>&1
        echo "suite $1 $2 $v rc $? [$((SECONDS - t0)) s]"
        grep -i "digest" $A/suite_$1_$2_$v.txt | sed 's/  */ /g' > /tmp/d_$v
      done
      echo "digests $1 $2: $(wc -l < /tmp/d_m) / $(wc -l < /tmp/d_d) lines, differing: $(diff /tmp/d_m /tmp/d_d | grep -c '^<')"
    done | tee $A/digests.txt
  fi ;;
esac
gzip -f $A/*.txt 2>/dev/null; tar czf $OUT/d${PART:-build}.tgz -C $OUT d${PART:-build}; echo "done [$((SECONDS - t0)) s]"
